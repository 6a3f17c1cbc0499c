"""Record one run for `tinykit.check_determinism`: every module's forward and gradients, in order.

While a `Recorder` is active, global module hooks (so `fn` needs no model handle) append one
`Record` per module call: a hash and summary stats of its inputs, its outputs and the
parameters/buffers of its whole subtree. Its backward adds a `grad` record holding the gradient
the module received (of its outputs, as `inputs`) and the gradient it passed on (its own share of
the gradient of its inputs, as `outputs`), so a nondeterministic backward is attributed to its
module. `probe(name, *tensors)` adds a record for tensors that no module produces
(a data batch, a loss). Hashes are blake2b over the raw bytes, so equal hashes mean bitwise equal;
`torch.hash_tensor` is an order-insensitive xor and would miss a shuffled batch.

The same recorder serves the numerics debugger (`tinykit.record`, `tinykit.detect_anomalies`):
scoped to one `model` and a `modules` glob, with a `summary` mode ("hash" for determinism, "stats"
for dumps, "minmax" for the anomaly detector: abs-min/abs-max only, one host sync per call), a
ring buffer of the last `frames` records, a step counter, and a `sink` that sees each record with
its raw tensors (the dump writer, the detector). Forwards that activation checkpointing re-runs
during backward are recorded as kind "recompute", so they are marked and not counted twice.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import math
import os
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

_active: list[Recorder] = []  # every recorder now active, outermost first
_RAISED = object()

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
    name: str = ""  # where it was found: "input[0]", "input.labels", "output.logits", "weight"
    absmin: float | None = None
    min: float | None = None
    max: float | None = None
    nonzero_absmin: float | None = None  # the smallest |x| > 0: how close to underflow
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    zeros: int | None = None

    @property
    def finite(self) -> bool:
        return not (self.nan or self.posinf or self.neginf)

    def flags(self) -> str:
        """ "NaN! +Inf!" style flags, "" when the tensor is finite."""
        found = [(self.nan, "NaN"), (self.posinf, "+Inf"), (self.neginf, "-Inf")]
        return " ".join(f"{label}!({n})" for n, label in found if n)

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
    step: int = 0
    cls: str = ""  # the module's class name
    params: list[TensorSummary] = field(default_factory=list)  # its own, with what="param"

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


def named_tensors(value: Any, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    """(label, tensor) pairs in `iter_tensors` order: "input[0]", "output.logits", "output[1][0]"."""
    import torch

    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from named_tensors(v, f"{prefix}.{k}")
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from named_tensors(v, f"{prefix}[{i}]")


def _call_tensors(args: Any, kwargs: Any) -> list[tuple[str, torch.Tensor]]:
    return [*named_tensors(tuple(args), "input"), *named_tensors(dict(kwargs or {}), "input")]


def _output_tensors(output: Any) -> list[tuple[str, torch.Tensor]]:
    if isinstance(output, (tuple, list)) and len(output) == 1:
        output = output[0]
    return list(named_tensors(output, "output"))


def _flat_and_hash(t: torch.Tensor) -> tuple[torch.Tensor, str]:
    import torch

    flat = t.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() and flat.stride(0) != 1:  # a broadcast size-1 tensor counts as contiguous
        flat = flat.new_empty(flat.numel()).copy_(flat)
    # the numpy view is the tensor's memory: no copy of the bytes to hash them
    digest = hashlib.blake2b(flat.view(torch.uint8).numpy().data, digest_size=16)
    digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
    return flat, digest.hexdigest()


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def summarize(
    t: torch.Tensor,
    keep_values: bool,
    name: str = "",
    full_stats: bool = False,
    with_hash: bool = True,
) -> TensorSummary:
    """Hash, shape, dtype, mean/std/absmax; `full_stats` adds min/max, abs-min, the smallest
    non-zero |x| and counts of NaN, +Inf, -Inf and zeros (what a dump index and `describe`
    hold), with mean/std/min/max over the finite elements."""
    import torch

    if with_hash:
        flat, digest = _flat_and_hash(t)
    else:
        flat, digest = t.detach().to("cpu").reshape(-1), ""
    mean = std = absmax = None
    extra: dict[str, Any] = {}
    if flat.numel() and not (t.is_complex() or t.dtype == torch.bool):
        if full_stats:
            mean, std, absmax, extra = _full_stats(flat)
        else:
            f64 = flat.to(torch.float64)
            mean, absmax = f64.mean().item(), f64.abs().max().item()
            std = f64.std().item() if flat.numel() > 1 else 0.0
    # small tensors keep a copy for determinism reports; a stats recording (dumps) does not
    keep = keep_values or (with_hash and not full_stats and flat.numel() <= KEEP_VALUES_UP_TO)
    return TensorSummary(
        hash=digest,
        shape=tuple(t.shape),
        dtype=_dtype(t),
        mean=mean,
        std=std,
        absmax=absmax,
        values=flat.clone() if keep else None,
        name=name,
        **extra,
    )


# Reused buffers for the temporaries of `_full_stats`: a fresh large tensor costs page faults
# (the allocator maps new memory for it) that dwarf the reduction itself. Freed on recorder exit.
_scratch_buffers: dict[tuple[Any, Any, int], torch.Tensor] = {}


def _scratch(like: torch.Tensor, slot: int = 0) -> torch.Tensor:
    key = (like.dtype, like.device, slot)
    buffer = _scratch_buffers.get(key)
    if buffer is None or buffer.numel() < like.numel():
        buffer = _scratch_buffers[key] = like.new_empty(like.numel())
    return buffer[: like.numel()].view(like.shape)


def _full_stats(flat: torch.Tensor) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(mean, std, absmax, the other fields) in a few fused reductions and one host sync;
    float32 (float64 for float64 input) is enough for statistics.

    The common case, a finite tensor, is seen from its min/max (NaN and Inf reach them) and
    needs no mask; only a tensor with NaN/Inf takes a second pass over its finite elements."""
    import torch

    if flat.dtype in (torch.float32, torch.float64):
        x = flat
    else:
        x = flat.float() if flat.is_floating_point() else flat.double()
    n = x.numel()
    absf = torch.abs(x, out=_scratch(x))
    lo_hi = torch.aminmax(x)
    mean = x.sum() / n
    # two-pass variance: a sum and a dot product (BLAS) are ~40x cheaper than torch.std_mean
    centered = torch.sub(x, mean, out=_scratch(x, 1)).reshape(-1)
    var = torch.dot(centered, centered) / max(n - 1, 1)
    # The smallest |x| > 0 without a mask (boolean ops are slow on CPU): the bits of a float
    # >= 0 order as its value, so bits - 1 keeps the order and sends 0 to -1, which the sign
    # mask turns into the largest pattern (a NaN's, that no finite |x| has). abs-min is 0 when
    # there are zeros, else that value: no pass of its own.
    ints, top = (
        (torch.int64, (1 << 63) - 1) if x.dtype == torch.float64 else (torch.int32, 2**31 - 1)
    )
    nz_bits = absf.view(ints).sub_(1).bitwise_and_(top).min()  # absf is ours to overwrite
    # + 1 back, as a float; with no non-zero element the pattern wraps to -0.0
    nonzero_absmin = nz_bits.add_(1).view(x.dtype)
    lo, hi, zeros, mean_v, std_v, nz = torch.stack(
        [*lo_hi, (n - torch.count_nonzero(x)).to(x.dtype), mean, var.sqrt(), nonzero_absmin]
    ).tolist()
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return _non_finite_stats(x)
    amin = 0.0 if zeros else nz
    extra = {
        "nan": 0,
        "posinf": 0,
        "neginf": 0,
        "zeros": int(zeros),
        "absmin": amin,
        "min": lo,
        "max": hi,
        "nonzero_absmin": nz or None,
    }
    return mean_v, std_v if n > 1 else 0.0, max(abs(lo), abs(hi)), extra


def _non_finite_stats(x: torch.Tensor) -> tuple[Any, Any, Any, dict[str, Any]]:
    """`_full_stats` of a tensor with NaN/Inf: the counts, and stats over its finite elements."""

    finite_mask = x.isfinite()
    counts = {
        "nan": int(x.isnan().sum()),
        "posinf": int((x == float("inf")).sum()),
        "neginf": int((x == float("-inf")).sum()),
    }
    finite = x[finite_mask]
    if not finite.numel():
        return None, None, None, {**counts, "zeros": 0}
    mean, std, absmax, extra = _full_stats(finite)
    return mean, std, absmax, {**extra, **counts}


def minmax_summaries(
    named: list[tuple[str, torch.Tensor]], seen: dict[int, tuple[Any, int, TensorSummary]]
) -> list[TensorSummary]:
    """Abs-min and abs-max of each tensor with ONE host sync for all of them (the detector's
    per-call cost); NaN/Inf counts are filled in only for a tensor that is not finite.

    `seen` maps id(tensor) to (weakref, version, summary) of tensors summarised before in this
    step: an input that is the unchanged output of the previous module is not reduced again.
    """
    import torch

    out: list[TensorSummary | None] = [None] * len(named)
    todo: list[int] = []
    reductions: list[torch.Tensor] = []
    for i, (name, t) in enumerate(named):
        ref, version, known = seen.get(id(t), (None, -1, None))
        if known is not None and ref is not None and ref() is t and version == t._version:
            out[i] = known if known.name == name else dataclasses.replace(known, name=name)
        elif t.is_floating_point() and t.numel() > 0:
            todo.append(i)
            reductions.extend(torch.aminmax(t.detach().abs()))
        else:
            out[i] = TensorSummary(hash="", shape=tuple(t.shape), dtype=_dtype(t), name=name)
    if todo:
        if len({r.dtype for r in reductions}) > 1:
            reductions = [r.float() for r in reductions]
        values = torch.stack(reductions).tolist()
        for j, i in enumerate(todo):
            name, t = named[i]
            absmin, absmax = values[2 * j], values[2 * j + 1]
            counts: dict[str, int] = {}
            if not absmax < float("inf"):  # inf or NaN somewhere
                d = t.detach()
                counts = {
                    "nan": int(d.isnan().sum()),
                    "posinf": int((d == float("inf")).sum()),
                    "neginf": int((d == float("-inf")).sum()),
                }
            summary = TensorSummary(
                hash="",
                shape=tuple(t.shape),
                dtype=_dtype(t),
                absmax=absmax,
                absmin=absmin,
                name=name,
                **counts,
            )
            out[i] = summary
            seen[id(t)] = (weakref.ref(t), t._version, summary)
    return [s for s in out if s is not None]


SUMMARIES = ("hash", "stats", "minmax", "none")
WHAT = ("input", "output", "grad", "param")


class Sink:
    """What a recorder hands each record to (the dump writer, the anomaly detector)."""

    def on_record(self, rec: Recorder, record: Record, tensors: RawTensors) -> None:
        """`tensors`: the raw (inputs, outputs) of the record, labelled as its summaries are."""

    def on_step(self, rec: Recorder, step: int) -> None:
        """Step `step` is over (the next one began, or the recorder is closing)."""

    def close(self, error: BaseException | None) -> Any:
        """The recorder exited (`error`: what the body raised, if anything)."""


RawTensors = tuple[list[tuple[str, "torch.Tensor"]], list[tuple[str, "torch.Tensor"]]]


class Recorder:
    """Context manager that records every module call made while it is active.

    Recorders stack: each one active at a time (say a determinism check and an anomaly detector)
    sees every call, and each removes all of its hooks on exit, also when the body raised.

    Without `model` every module called is recorded, named from the first module called outside
    any other (a root). With `model`, only its modules are, by their names in it, and each
    top-level call of `model` after the first starts a new step (unless `next_step()` is called,
    which then counts steps alone). `modules` is a glob (or several) on qualified names; `what`
    picks inputs, outputs, gradients (backward) and the module's own parameters ("param");
    `steps` records only those steps; `frames` keeps only the last N records (a ring buffer).
    """

    def __init__(
        self,
        keep_values: bool = False,
        *,
        model: torch.nn.Module | None = None,
        modules: str | Iterable[str] = "*",
        what: Iterable[str] = ("input", "output", "grad"),
        summary: str = "hash",
        frames: int | None = None,
        steps: Iterable[int] | range | None = None,
        sink: Sink | None = None,
        auto_steps: bool | None = None,
        hashes: bool = True,
    ) -> None:
        from tinykit.errors import UsageError

        self.what = frozenset(what)
        if unknown := sorted(self.what - set(WHAT)) or summary not in SUMMARIES:
            raise UsageError(
                f"Recorder(what={sorted(self.what)}, summary={summary!r}): unknown "
                f"{unknown or summary!r}. Use what from {WHAT} and summary from {SUMMARIES}."
            )
        if frames is not None and frames < 1:
            raise UsageError(f"Recorder(frames={frames}) keeps nothing. Pass frames >= 1 or None.")
        self.keep_values = keep_values
        self.hashes = hashes  # summary "stats": hash each tensor's bytes too (a dump diffs by them)
        self.model = model
        self.patterns = (modules,) if isinstance(modules, str) else tuple(modules)
        self.summary = summary
        self.records: list[Record] | deque[Record] = deque(maxlen=frames) if frames else []
        # a set, or anything with `in` (range(0, 2**62, k): every k-th step)
        self.steps: range | frozenset[int] | None = (
            steps if steps is None or isinstance(steps, range) else frozenset(steps)
        )
        self.sink = sink
        self.step = 0
        # steps: top-level calls of `model`, or with auto_steps and no model, of any root
        self._auto_step = model is not None if auto_steps is None else auto_steps
        self._model_calls = 0
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._wanted: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._foreign: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._seen: dict[int, tuple[Any, int, TensorSummary]] = {}  # minmax, this step
        self._roots = 0
        # (seq, name, kind) of the forward calls in progress; kind None: seen, not recorded
        self._stack: list[tuple[int, str, str | None]] = []
        self._seq = 0
        self._calls: dict[tuple[str, str], int] = {}
        self._handles: list[Any] = []  # tensor and autograd-node hooks, removed on exit
        self._global: list[Any] = []  # the two global module hooks, while installed
        # With a model and a steps filter the global hooks are on only in recorded steps, so
        # the other steps (a sampled detector's nine in ten) run no per-module hook at all.
        self._gated = model is not None and self.steps is not None
        self._gate_handle: Any = None
        self._root_seen = False
        self._hashes: dict[int, tuple[Any, int, str]] = {}  # id -> (weakref, version, hash)
        self._open = False
        self.result: Any = None  # what the sink's close returned (a dump's folder)
        if model is not None:
            root = type(model).__name__
            for sub_name, sub in model.named_modules():
                self._names.setdefault(sub, sub_name or root)

    def __enter__(self) -> Recorder:
        self._open = True
        _active.append(self)
        if self._gated:
            # only the model's own pre-hook runs in steps that are not recorded (see _gate)
            assert self.model is not None
            self._gate_handle = self.model.register_forward_pre_hook(self._gate)
        if not self._gated or self.recording:
            self._install()
        return self

    def _install(self) -> None:
        """The global module hooks: every module call runs them while they are installed."""
        from torch.nn.modules import module as nn_module

        if not self._global:
            self._global = [
                nn_module.register_module_forward_pre_hook(self._pre_hook),
                nn_module.register_module_forward_hook(
                    self._post_hook, with_kwargs=True, always_call=True
                ),
            ]

    def _uninstall(self) -> None:
        for handle in self._global:
            handle.remove()
        self._global = []

    def _gate(self, module: torch.nn.Module, args: Any) -> None:
        """A call of the model while the global hooks are off: count the step, and turn them on
        (recording this very call) when a recorded step begins."""
        import torch

        if self._root_seen or self._global or torch._C._current_graph_task_id() != -1:
            self._root_seen = False
            return  # the global pre-hook saw this call already; or a recompute in backward
        if self._auto_step:
            if self._model_calls:
                self._end_step()
            self._model_calls += 1
        if self._global:  # _end_step turned them on: this call is the first of the step
            self._push(module, self._name(module), recompute=False)

    def close(self) -> None:
        """Stop recording (as leaving the `with` block does); a second call does nothing."""
        self.__exit__(None, None, None)

    def __exit__(self, *exc: object) -> None:
        if self not in _active:
            return
        self._open = False
        self._uninstall()
        if self._gate_handle is not None:
            self._gate_handle.remove()
            self._gate_handle = None
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._hashes.clear()
        self._seen.clear()
        _active.remove(self)
        if not _active:
            _scratch_buffers.clear()
        if self.sink is not None:
            if exc[0] is None:
                self.sink.on_step(self, self.step)
            self.result = self.sink.close(exc[1] if isinstance(exc[1], BaseException) else None)

    def next_step(self) -> None:
        """End the current step; from now on only these calls count steps."""
        self._auto_step = False
        self._end_step()

    def _end_step(self) -> None:
        if self.sink is not None:
            self.sink.on_step(self, self.step)
        self.step += 1
        self._seen.clear()
        # Hooks on the tensors and graph nodes of finished steps die with them: drop their
        # handles, so a long run under a ring buffer keeps a flat memory.
        self._handles = [h for h in self._handles if h.hooks_dict_ref() is not None]
        if self._gated and self._open:  # per-module hooks only in recorded steps
            if self.recording:
                self._install()
            else:
                self._uninstall()

    @property
    def recording(self) -> bool:
        return self.steps is None or self.step in self.steps

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _add(self, seq: int, module: str, kind: str, raw: RawTensors = ([], []), **fields: Any):
        call = self._calls.get((module, kind), 0)
        self._calls[(module, kind)] = call + 1
        record = Record(seq=seq, module=module, kind=kind, call=call, step=self.step, **fields)
        self.records.append(record)
        if self.sink is not None:
            self.sink.on_record(self, record, raw)

    def _name(self, module: torch.nn.Module) -> str | None:
        if module not in self._names:
            if self.model is not None:
                if module in self._foreign:
                    return None
                # a submodule swapped in after the recorder started: name the tree again
                root = type(self.model).__name__
                for sub_name, sub in self.model.named_modules():
                    self._names.setdefault(sub, sub_name or root)
                if module not in self._names:
                    self._foreign[module] = True  # not part of the model this recorder watches
                    return None
                return self._names[module]
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

    def _is_wanted(self, module: torch.nn.Module, name: str) -> bool:
        wanted = self._wanted.get(module)
        if wanted is None:
            wanted = self.patterns == ("*",) or any(
                fnmatch.fnmatchcase(name, p) for p in self.patterns
            )
            self._wanted[module] = wanted
        return wanted

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

    def summaries(self, named: list[tuple[str, torch.Tensor]]) -> list[TensorSummary]:
        if len(self._seen) > 100_000:  # one very long step: stay bounded
            self._seen.clear()
        if self.summary == "minmax":
            return minmax_summaries(named, self._seen)
        if self.summary == "none":  # the sink looks at the raw tensors itself
            return []
        if self.summary == "hash":
            return [summarize(t, self.keep_values, n) for n, t in named]
        out = []
        for n, t in named:  # stats: an input that is an unchanged earlier output is not redone
            ref, version, known = self._seen.get(id(t), (None, -1, None))
            if known is not None and ref is not None and ref() is t and version == t._version:
                out.append(known if known.name == n else dataclasses.replace(known, name=n))
                continue
            summary = summarize(t, self.keep_values, n, full_stats=True, with_hash=self.hashes)
            self._seen[id(t)] = (weakref.ref(t), t._version, summary)
            out.append(summary)
        return out

    def _pre_hook(self, module: torch.nn.Module, args: Any) -> None:
        import torch

        name = self._name(module)
        # Inside a backward pass a forward is activation checkpointing recomputing it.
        recompute = torch._C._current_graph_task_id() != -1
        if (
            (module is self.model or (self.model is None and self._auto_step))
            and not self._stack
            and not recompute
        ):
            self._root_seen = self._gated  # so the gate does not count this call again
            if self._auto_step and self._model_calls:
                self._end_step()
            self._model_calls += 1
            if not self._global:
                return  # _end_step turned the hooks off: the step is not recorded
        self._push(module, name, recompute)

    def _push(self, module: torch.nn.Module, name: str | None, recompute: bool) -> None:
        kind = None
        if name is not None and self.recording and self._is_wanted(module, name):
            kind = "recompute" if recompute else "forward"
        self._stack.append((self._next_seq() if kind else 0, name or "", kind))

    def _post_hook(
        self, module: torch.nn.Module, args: Any, kwargs: Any, output: Any = _RAISED
    ) -> None:
        if not self._stack:  # a call that began before this recorder was entered
            return
        seq, name, kind = self._stack.pop()  # runs also when forward raised (always_call=True)
        if output is _RAISED and kind == "recompute":
            # checkpointing stops a recomputation (by raising) once it has what backward needs
            output = None
        if kind is None or output is _RAISED:  # torch passes no output when forward raised
            return
        parent = next((n for _, n, k in reversed(self._stack) if k), "")
        inputs = _call_tensors(args, kwargs)
        outs = _output_tensors(output)
        what = self.what
        self._add(
            seq,
            name,
            kind,
            raw=(inputs if "input" in what else [], outs if "output" in what else []),
            inputs=self.summaries(inputs) if "input" in what else [],
            parent=parent,
            outputs=self.summaries(outs) if "output" in what else [],
            state=self._state_hash(module) if self.summary == "hash" else "",
            cls=type(module).__name__,
            params=self.summaries(list(module.named_parameters(recurse=False)))
            if "param" in what
            else [],
        )
        if kind == "forward" and "grad" in what and any(t.requires_grad for _, t in outs):
            _Backward(self, name, parent, inputs, outs, type(module).__name__)

    def _hook(self, handle: Any) -> None:
        self._handles.append(handle)

    def probe(self, name: str, tensors: tuple[Any, ...]) -> None:
        named = list(named_tensors(tensors, "probe"))
        self._add(self._next_seq(), name, "probe", raw=([], named), outputs=self.summaries(named))


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
        named_inputs: list[tuple[str, torch.Tensor]],
        named_outs: list[tuple[str, torch.Tensor]],
        cls: str = "",
    ) -> None:
        self.rec, self.name, self.parent, self.cls = rec, name, parent, cls
        self.out_names = [f"grad {n}" for n, _ in named_outs]
        grad_inputs = [(n, t) for n, t in named_inputs if t.requires_grad]
        self.in_names = [f"grad {n}" for n, _ in grad_inputs]
        outs = [t for _, t in named_outs]
        self.grad_outs: list[torch.Tensor | None] = [None] * len(outs)
        self.grad_ins: list[torch.Tensor | None] = []
        self.step = rec.step  # the step of the forward: a backward runs before the next one
        consumers = self._consumers([t for _, t in grad_inputs], outs)
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
                self._write(label, [(self.out_names[i], grad)], [])

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
                    [
                        (n, g)
                        for n, g in zip(self.out_names, self.grad_outs, strict=True)
                        if g is not None
                    ],
                    [
                        (n, g)
                        for n, g in zip(self.in_names, self.grad_ins, strict=True)
                        if g is not None
                    ],
                )
                # a second backward through a retained graph runs the same nodes again
                self.pending = self.consumers
                self.grad_ins = [None] * len(self.grad_ins)

        return hook

    def _write(
        self,
        label: str,
        grad_outs: list[tuple[str, torch.Tensor]],
        grad_ins: list[tuple[str, torch.Tensor]],
    ) -> None:
        rec = self.rec
        step, rec.step = rec.step, self.step  # recorded under its forward's step
        try:
            rec._add(
                rec._next_seq(),
                label,
                "grad",
                raw=(grad_outs, grad_ins),
                parent=self.parent,
                cls=self.cls,
                inputs=rec.summaries(grad_outs),
                outputs=rec.summaries(grad_ins),
            )
        finally:
            rec.step = step


def probe(name: str, *tensors: Any) -> None:
    """Record `tensors` under `name` in the running determinism check; a no-op outside one.

    Use it for values no module produces, such as the batch a data loader yields, so a data-order
    change is reported as `name` instead of as the first module that consumed the data.
    """
    for rec in _active:
        rec.probe(name, tensors)


def record(
    model: torch.nn.Module,
    modules: str | Iterable[str] = "*",
    what: Iterable[str] = ("input", "output", "grad"),
    steps: Iterable[int] | None = None,
    tensors: str = "stats",
    out: str | os.PathLike[str] | None = None,
    max_bytes: int | None = None,
    *,
    frames: int | None = None,
    hashes: bool | None = None,
) -> Recorder:
    """Record every call of `model`'s modules (matching the `modules` glob): a context manager.

    Args:
        model: the model; its top-level calls after the first start new steps (or call
            `rec.next_step()`).
        modules: glob(s) on qualified names, e.g. "model.layers.*.mlp".
        what: any of "input", "output", "grad" (each module's backward: the gradient it received
            and the one it passed on) and "param" (the module's own parameters).
        steps: record only these steps (None: all).
        tensors: "stats" (hash, shape, dtype, min/max/mean/std, NaN/Inf/zero counts) or "full"
            (also the tensors, into safetensors shards; needs `out`).
        out: a new folder to write the dump into (read it with `tinykit.diff_dumps` or
            `tinykit dumps diff`); None keeps the records in memory (`rec.records`).
        max_bytes: a bound on the dump's size; records past it are left out and the manifest
            says `truncated`.
        frames: keep only the last N records in memory (a ring buffer; the dump keeps all).
        hashes: hash every tensor's bytes (blake2b; a stats dump is diffed bitwise by them).
            Default: when writing a dump (`out`); in memory the summaries' `hash` is "" unless
            hashes=True, as hashing costs a copy to the CPU and a pass over every byte.
    """
    from tinykit.errors import UsageError

    if tensors not in ("stats", "full"):
        raise UsageError(f"record(tensors={tensors!r}) is unknown. Use 'stats' or 'full'.")
    if tensors == "full" and out is None:
        raise UsageError("record(tensors='full') writes tensors to disk: pass out=DIR too.")
    if max_bytes is not None and max_bytes < 1:
        raise UsageError(f"record(max_bytes={max_bytes}) must be >= 1 or None.")
    sink = None
    if out is not None:
        from tinykit.numerics.dumps import DumpWriter

        options = {
            "modules": [modules] if isinstance(modules, str) else list(modules),
            "what": sorted(what),
            "steps": None if steps is None else sorted(steps),
            "tensors": tensors,
            "max_bytes": max_bytes,
        }
        sink = DumpWriter(out, model, tensors, max_bytes, options)
    return Recorder(
        model=model,
        modules=modules,
        what=what,
        summary="stats",
        frames=frames,
        steps=steps,
        sink=sink,
        hashes=out is not None if hashes is None else hashes,
    )
