"""Record one run for `tinykit.check_determinism`: every module's forward and gradients, in order.

While a `Recorder` is active, global module hooks (so `fn` needs no model handle) append one
`Record` per module call: a hash and summary stats of its inputs, its outputs and its own
parameters/buffers. A tensor hook on each output adds a `grad` record when autograd computes the
gradient of that output. `probe(name, *tensors)` adds a record for tensors that no module produces
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

_active: Recorder | None = None

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
    """One module call (`forward`), one output gradient (`grad`) or one `probe`."""

    seq: int  # start order: a forward record gets it before its children run
    module: str
    kind: str
    call: int  # how many times this (module, kind) was recorded before in this run
    inputs: list[TensorSummary] = field(default_factory=list)
    outputs: list[TensorSummary] = field(default_factory=list)
    state: str = ""  # hash of the module's own parameters and buffers
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


def _state_hash(module: torch.nn.Module) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for name, t in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
        if t is not None:
            digest.update(name.encode())
            digest.update(_flat_and_hash(t)[1].encode())
    return digest.hexdigest()


class Recorder:
    """Context manager that records every module call made while it is active."""

    def __init__(self, keep_values: bool = False) -> None:
        self.keep_values = keep_values
        self.records: list[Record] = []
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._roots = 0
        self._stack: list[tuple[int, str]] = []  # (seq, name) of the forward calls in progress
        self._seq = 0
        self._calls: dict[tuple[str, str], int] = {}
        self._handles: list[Any] = []

    def __enter__(self) -> Recorder:
        from torch.nn.modules import module as nn_module

        global _active
        if _active is not None:
            from tinykit.errors import UsageError

            raise UsageError(
                "check_determinism was called while another check is recording in this "
                "process. Nested checks would record each other's modules. Call it from outside "
                "the checked function."
            )
        _active = self
        self._handles = [
            nn_module.register_module_forward_pre_hook(self._pre_hook),
            nn_module.register_module_forward_hook(self._post_hook, with_kwargs=True),
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        for handle in self._handles:
            handle.remove()
        _active = None

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

    def _pre_hook(self, module: torch.nn.Module, args: Any) -> None:
        self._stack.append((self._next_seq(), self._name(module)))

    def _post_hook(self, module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        seq, name = self._stack.pop()
        parent = self._stack[-1][1] if self._stack else ""
        summ = [summarize(t, self.keep_values) for t in iter_tensors((args, kwargs))]
        outs = list(iter_tensors(output))
        self._add(
            seq,
            name,
            "forward",
            inputs=summ,
            parent=parent,
            outputs=[summarize(t, self.keep_values) for t in outs],
            state=_state_hash(module),
        )
        for i, t in enumerate(outs):
            if t.requires_grad:
                label = name if len(outs) == 1 else f"{name}[{i}]"
                t.register_hook(self._grad_hook(label, parent))

    def _grad_hook(self, name: str, parent: str):
        def hook(grad: torch.Tensor) -> None:
            self._add(
                self._next_seq(),
                name,
                "grad",
                parent=parent,
                outputs=[summarize(grad, self.keep_values)],
            )

        return hook

    def probe(self, name: str, tensors: tuple[Any, ...]) -> None:
        outs = [summarize(t, self.keep_values) for t in iter_tensors(tensors)]
        self._add(self._next_seq(), name, "probe", outputs=outs)


def probe(name: str, *tensors: Any) -> None:
    """Record `tensors` under `name` in the running determinism check; a no-op outside one.

    Use it for values no module produces, such as the batch a data loader yields, so a data-order
    change is reported as `name` instead of as the first module that consumed the data.
    """
    if _active is not None:
        _active.probe(name, tensors)
