"""Record one run for `tinykit.check_determinism`: every module's forward and gradients, in order.

While a `Recorder` is active, global module hooks (so `fn` needs no model handle) append one
`Record` per module call: a hash and summary stats of its inputs, its outputs and the
parameters/buffers of its whole subtree. Its backward adds a `grad` record holding the gradient
the module received (of its outputs, as `inputs`) and the gradient it passed on (its own share of
the gradient of its inputs, as `outputs`), so a nondeterministic backward is attributed to its
module. `probe(name, *tensors)` adds a record for tensors that no module produces
(a data batch, a loss). Hashes are blake2b over the raw bytes, so equal hashes mean bitwise equal;
`torch.hash_tensor` is an order-insensitive xor and would miss a shuffled batch.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

_active: list[Recorder] = []  # every recorder now active, outermost first

# Tensors up to this many elements keep a copy, so a report can say how much two runs differ
# (max |delta|, how many elements) instead of only that their hashes differ.
KEEP_VALUES_UP_TO = 1 << 16


@dataclass(frozen=True)
class TensorSummary:
    """One tensor, reduced to what two runs are compared on."""

    hash: str
    shape: tuple[int, ...]
    dtype: str
    mean: float | None = None
    std: float | None = None
    absmax: float | None = None
    values: Any = None  # a flat CPU copy: small tensors always, any size when a tolerance is used

    def stats(self) -> str:
        if self.mean is None:
            return f"{self.dtype}{list(self.shape)}"
        return (
            f"{self.dtype}{list(self.shape)} mean={self.mean:.6g} std={self.std:.6g} "
            f"absmax={self.absmax:.6g}"
        )


@dataclass
class Record:
    """One module call (`forward`), one module backward (`grad`) or one `probe`.

    For `grad`, `inputs` are the gradients of the module's outputs (what its backward received)
    and `outputs` its share of the gradients of its inputs (what its backward produced).
    """

    seq: int  # start order: a forward record gets it before its children run
    module: str
    kind: str
    call: int  # how many times this (module, kind) was recorded before in this run
    inputs: list[TensorSummary] = field(default_factory=list)
    outputs: list[TensorSummary] = field(default_factory=list)
    state: str = ""  # hash of the parameters and buffers of the module and its submodules
    parent: str = ""  # the module whose forward called this one ("" for a root)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.module, self.kind, self.call)


def iter_tensors(value: Any) -> Iterator[torch.Tensor]:
    """Tensors inside nested tuples, lists and mappings (ModelOutput is a mapping), in order."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from iter_tensors(v)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from iter_tensors(v)


def _flat_and_hash(t: torch.Tensor) -> tuple[torch.Tensor, str]:
    import torch

    flat = t.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() and flat.stride(0) != 1:  # a broadcast size-1 tensor counts as contiguous
        flat = flat.new_empty(flat.numel()).copy_(flat)
    digest = hashlib.blake2b(flat.view(torch.uint8).numpy().tobytes(), digest_size=16)
    digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
    return flat, digest.hexdigest()


def summarize(t: torch.Tensor, keep_values: bool) -> TensorSummary:
    import torch

    flat, digest = _flat_and_hash(t)
    mean = std = absmax = None
    if flat.numel() and not (t.is_complex() or t.dtype == torch.bool):
        f64 = flat.to(torch.float64)
        mean, absmax = f64.mean().item(), f64.abs().max().item()
        std = f64.std().item() if flat.numel() > 1 else 0.0
    return TensorSummary(
        hash=digest,
        shape=tuple(t.shape),
        dtype=str(t.dtype).replace("torch.", ""),
        mean=mean,
        std=std,
        absmax=absmax,
        values=flat.clone() if keep_values or flat.numel() <= KEEP_VALUES_UP_TO else None,
    )


class Recorder:
    """Context manager that records every module call made while it is active.

    Recorders stack: each one active at a time (say a determinism check and an anomaly detector)
    sees every call, and each removes all of its hooks on exit, also when the body raised.
    """

    def __init__(self, keep_values: bool = False) -> None:
        self.keep_values = keep_values
        self.records: list[Record] = []
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._roots = 0
        self._stack: list[tuple[int, str]] = []  # (seq, name) of the forward calls in progress
        self._seq = 0
        self._calls: dict[tuple[str, str], int] = {}
        self._handles: list[Any] = []  # module, tensor and autograd-node hooks, removed on exit
        self._hashes: dict[int, tuple[Any, int, str]] = {}  # id -> (weakref, version, hash)
        self._open = False

    def __enter__(self) -> Recorder:
        from torch.nn.modules import module as nn_module

        self._open = True
        _active.append(self)
        self._handles = [
            nn_module.register_module_forward_pre_hook(self._pre_hook),
            nn_module.register_module_forward_hook(
                self._post_hook, with_kwargs=True, always_call=True
            ),
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        self._open = False
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._hashes.clear()
        _active.remove(self)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _add(self, seq: int, module: str, kind: str, **fields: Any) -> None:
        call = self._calls.get((module, kind), 0)
        self._calls[(module, kind)] = call + 1
        self.records.append(Record(seq=seq, module=module, kind=kind, call=call, **fields))

    def _name(self, module: torch.nn.Module) -> str:
        if module not in self._names:
            # A module first called outside any other module is a root: name its whole tree now.
            self._roots += 1
            prefix = "" if self._roots == 1 else f"{type(module).__name__}#{self._roots}."
            for sub_name, sub in module.named_modules():
                self._names.setdefault(
                    sub,
                    prefix + sub_name
                    if sub_name
                    else (prefix.rstrip(".") or type(module).__name__),
                )
        return self._names[module]

    def _tensor_hash(self, t: torch.Tensor) -> str:
        # Parameters change only in place (optimizer steps bump their version counter), so a
        # hash is reused until then: the root's state covers every parameter at little cost.
        ref, version, digest = self._hashes.get(id(t), (None, -1, ""))
        if ref is None or ref() is not t or version != t._version:
            digest = _flat_and_hash(t)[1]
            self._hashes[id(t)] = (weakref.ref(t), t._version, digest)
        return digest

    def _state_hash(self, module: torch.nn.Module) -> str:
        """The parameters and buffers of the module and all its submodules.

        All of them, not only its own: a container such as a decoder stack owns no parameter,
        yet its output changes when a child's weights do. Counting only its own made it look
        like the culprit (same inputs, same "state", other output) once the weights had already
        diverged in an earlier step.
        """
        digest = hashlib.blake2b(digest_size=16)
        for name, t in [*module.named_parameters(), *module.named_buffers()]:
            if t is not None:
                digest.update(name.encode())
                digest.update(self._tensor_hash(t).encode())
        return digest.hexdigest()

    def _pre_hook(self, module: torch.nn.Module, args: Any) -> None:
        self._stack.append((self._next_seq(), self._name(module)))

    def _post_hook(self, module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        if not self._stack:  # a call that began before this recorder was entered
            return
        seq, name = self._stack.pop()  # runs also when forward raised (always_call=True)
        parent = self._stack[-1][1] if self._stack else ""
        inputs = list(iter_tensors((args, kwargs)))
        outs = list(iter_tensors(output))
        self._add(
            seq,
            name,
            "forward",
            inputs=[summarize(t, self.keep_values) for t in inputs],
            parent=parent,
            outputs=[summarize(t, self.keep_values) for t in outs],
            state=self._state_hash(module),
        )
        if any(t.requires_grad for t in outs):
            _Backward(self, name, parent, inputs, outs)

    def _hook(self, handle: Any) -> None:
        self._handles.append(handle)

    def probe(self, name: str, tensors: tuple[Any, ...]) -> None:
        outs = [summarize(t, self.keep_values) for t in iter_tensors(tensors)]
        self._add(self._next_seq(), name, "probe", outputs=outs)


class _Backward:
    """The backward of one module call: the gradient it received and the gradient it passed on.

    Output gradients come from tensor hooks on the outputs. Input gradients are this module's own
    contribution to the gradient of each input (not the input's total gradient, which also holds
    other consumers' shares): the autograd nodes created inside the call that consume an input
    get a node hook, and the record is written when the last of them has run. So a record whose
    output gradient matched and whose input gradient differs names the module whose backward is
    at fault. A module with no input that requires grad (an embedding) gets a record per output
    gradient instead, with no input gradient.
    """

    def __init__(
        self,
        rec: Recorder,
        name: str,
        parent: str,
        inputs: list[torch.Tensor],
        outs: list[torch.Tensor],
    ) -> None:
        self.rec, self.name, self.parent = rec, name, parent
        self.grad_outs: list[torch.Tensor | None] = [None] * len(outs)
        self.grad_ins: list[torch.Tensor | None] = []
        consumers = self._consumers([t for t in inputs if t.requires_grad], outs)
        self.consumers = self.pending = len(consumers)
        for i, t in enumerate(outs):
            if t.requires_grad:
                rec._hook(t.register_hook(self._output_hook(i, len(outs))))
        for node, taps in consumers:
            rec._hook(node.register_hook(self._node_hook(taps)))

    def _consumers(
        self, inputs: list[torch.Tensor], outs: list[torch.Tensor]
    ) -> list[tuple[Any, list[tuple[int, int]]]]:
        """[(node made in this call, [(its next_functions slot, index of the input it reads)])]."""
        from torch.autograd.graph import get_gradient_edge

        self.grad_ins = [None] * len(inputs)
        edges: dict[tuple[int, int], tuple[int, Any]] = {}
        for i, t in enumerate(inputs):
            edge = get_gradient_edge(t)
            edges.setdefault((id(edge.node), edge.output_nr), (i, edge.node))
        if not edges:
            return []
        # Autograd numbers nodes in creation order, so the nodes made inside this call come after
        # every input's node: the walk stops at older ones instead of crossing the whole graph.
        # (AccumulateGrad nodes of leaf inputs carry no such number and have no inputs.)
        floor = max((n._sequence_nr() for _, n in edges.values() if n.next_functions), default=-1)
        found: dict[int, tuple[Any, list[tuple[int, int]]]] = {}
        seen: set[int] = set()
        todo = []
        for t in outs:
            if not t.requires_grad:
                continue
            out_edge = get_gradient_edge(t)
            if (id(out_edge.node), out_edge.output_nr) not in edges:
                todo.append(out_edge.node)  # an output that is an input made no node of its own
        while todo:
            node = todo.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            for slot, (nxt, nr) in enumerate(node.next_functions):
                if nxt is None:
                    continue
                if (id(nxt), nr) in edges:
                    found.setdefault(id(node), (node, []))[1].append(
                        (slot, edges[(id(nxt), nr)][0])
                    )
                elif nxt.next_functions and nxt._sequence_nr() > floor:
                    todo.append(nxt)
        return list(found.values())

    def _output_hook(self, i: int, n: int):
        def hook(grad: torch.Tensor) -> None:
            if not self.rec._open:
                return
            self.grad_outs[i] = grad.detach()
            if not self.consumers:  # no input gradient to wait for: record this as it arrives
                label = self.name if n == 1 else f"{self.name}[{i}]"
                self._write(label, [grad], [])

        return hook

    def _node_hook(self, taps: list[tuple[int, int]]):
        def hook(grad_inputs: tuple[Any, ...], grad_outputs: tuple[Any, ...]) -> None:
            if not self.rec._open:
                return
            for slot, i in taps:
                g = grad_inputs[slot]
                if g is not None:
                    g = g.detach()
                    self.grad_ins[i] = g if self.grad_ins[i] is None else self.grad_ins[i] + g
            self.pending -= 1
            if self.pending == 0:
                self._write(
                    self.name,
                    [g for g in self.grad_outs if g is not None],
                    [g for g in self.grad_ins if g is not None],
                )
                # a second backward through a retained graph runs the same nodes again
                self.pending = self.consumers
                self.grad_ins = [None] * len(self.grad_ins)

        return hook

    def _write(self, label: str, grad_outs: list[Any], grad_ins: list[Any]) -> None:
        keep = self.rec.keep_values
        self.rec._add(
            self.rec._next_seq(),
            label,
            "grad",
            parent=self.parent,
            inputs=[summarize(g, keep) for g in grad_outs],
            outputs=[summarize(g, keep) for g in grad_ins],
        )


def probe(name: str, *tensors: Any) -> None:
    """Record `tensors` under `name` in the running determinism check; a no-op outside one.

    Use it for values no module produces, such as the batch a data loader yields, so a data-order
    change is reported as `name` instead of as the first module that consumed the data.
    """
    for rec in _active:
        rec.probe(name, tensors)
