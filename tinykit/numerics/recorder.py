"""Record one run for `tinykit.check_determinism`: every module's forward and gradients, in order.

While a `Recorder` is active, global module hooks (so `fn` needs no model handle) append one
`Record` per module call: a hash and summary stats of its inputs, its outputs and the
parameters/buffers of its whole subtree. Its backward adds a `grad` record holding the gradient
the module received (of its outputs, as `inputs`) and the gradient it passed on (its own share of
the gradient of its inputs, as `outputs`), so a nondeterministic backward is attributed to its
module. `probe(name, *tensors)` adds a record for tensors that no module produces
(a data batch, a loss). Hashes are blake2b over the raw bytes, so equal hashes mean bitwise equal;
`torch.hash_tensor` is an order-insensitive xor and would miss a shuffled batch.

With "step" in `what` (`tinykit.record`'s default) each top-level call of the model also adds
the step's own records when it returns: "input" (the tensors it was given, by argument name: `labels`,
`input_ids`), "params" (every parameter as the step began, once per step) and "loss" (the `loss`
it returned), so a data or an optimizer difference is seen as such, not as the first module that
read the data or the weights.

The same recorder serves the numerics debugger (`tinykit.record`, `tinykit.detect_anomalies`):
scoped to one `model` and a `modules` glob, with a `summary` mode ("hash" for determinism, "stats"
for dumps, "minmax" for the anomaly detector: abs-min/abs-max only, one host sync per call), a
ring buffer of the last `frames` records, a step counter, and a `sink` that sees each record with
its raw tensors (the dump writer, the detector). Forwards that activation checkpointing re-runs
during backward are recorded as kind "recompute", so they are marked and not counted twice.
"""

from __future__ import annotations

import fnmatch
import hashlib
import weakref
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tinykit.numerics.backward import BackwardTaps, CallBackward, sequence_nr
from tinykit.numerics.stats import flat_and_hash, minmax_summaries, scratch_buffers, summarize
from tinykit.numerics.summary import (
    FORWARD,
    INPUT,
    LOSS,
    PARAMS,
    PROBE,
    RECOMPUTE,
    RawTensors,
    Record,
    TensorSummary,
    argument_tensors,
    call_tensors,
    named_tensors,
    output_tensors,
)

if TYPE_CHECKING:
    import torch

_active: list[Recorder] = []  # every recorder now active, outermost first
_RAISED = object()

SUMMARIES = ("hash", "stats", "minmax", "none")
WHAT = ("input", "output", "grad", "param", "step")


class Sink:
    """What a recorder hands each record to (the dump writer, the anomaly detector)."""

    def on_record(self, rec: Recorder, record: Record, tensors: RawTensors) -> None:
        """`tensors`: the raw (inputs, outputs) of the record, labelled as its summaries are."""

    def on_step(self, rec: Recorder, step: int) -> None:
        """Step `step` is over (the next one began, or the recorder is closing)."""

    def close(self, error: BaseException | None) -> Any:
        """The recorder exited (`error`: what the body raised, if anything)."""


class Recorder:
    """Context manager that records every module call made while it is active.

    Recorders stack: each one active at a time (say a determinism check and an anomaly detector)
    sees every call, and each removes all of its hooks on exit, also when the body raised.

    Without `model` every module called is recorded; a module called outside any other is a
    root, and the first root with parameters is the model: its modules are named as `model`'s
    would be, the other roots' names start with "Class#n.". With `model`, only its modules are
    recorded, by their names in it. Each top-level call of the model after the first starts a new
    step (with `auto_steps`; `next_step()` then counts steps alone). `modules` is a glob (or
    several) on qualified names; `what` picks inputs, outputs, gradients (backward), the
    module's own parameters ("param") and the step records ("step", see the module docstring);
    `steps` records only those steps (numbered from `first_step`: a resumed run numbers its
    steps as the uninterrupted one did); `frames` keeps only the last N records (a ring buffer).
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
        first_step: int = 0,
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
        self.step = self.first_step = first_step
        self.roots = "step" in self.what  # the step records
        self._main: Any = None  # without a model: a weakref to the first root with parameters
        self._top: Any = None  # the top-level call of the model in progress (a recorded step's)
        self._params_step: int | None = None  # the step whose "params" record is made
        # steps: top-level calls of `model`, or with auto_steps and no model, of any root
        self._auto_step = model is not None if auto_steps is None else auto_steps
        self._model_calls = 0
        self._names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._wanted: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._foreign: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._seen: dict[int, tuple[Any, int, TensorSummary]] = {}  # minmax, this step
        self._roots = 0
        # (seq, name, kind, autograd's next node number) of the forward calls in progress;
        # kind None: seen, not recorded
        self._stack: list[tuple[int, str, str | None, int]] = []
        self._taps = BackwardTaps(self)  # the backward hooks of the forward in progress
        self._seq = 0
        self._calls: dict[tuple[str, str], int] = {}
        self._handles: list[Any] = []  # tensor and autograd-node hooks, removed on exit
        self._live_handles = 256  # how many were alive at the last pruning (at least 256)
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
            self._top = module
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
            scratch_buffers.clear()
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
        if len(self._handles) > 2 * self._live_handles:  # amortized: a pass over all of them
            self._handles = [h for h in self._handles if h.hooks_dict_ref() is not None]
            self._live_handles = max(len(self._handles), 256)
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
            # The first one with parameters is the model (a transform or a loss module called
            # before it is not): its names are the ones `record(model)` gives.
            self._roots += 1
            main = self._main is None and next(module.parameters(), None) is not None
            if main:
                self._main = weakref.ref(module)
            prefix = "" if main else f"{type(module).__name__}#{self._roots}."
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
            digest = flat_and_hash(t)[1]
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
                out.append(known if known.name == n else known.renamed(n))
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
        if not self._stack and not recompute and module is self.main_root:
            self._root_seen = self._gated  # so the gate does not count this call again
            if self._auto_step and self._model_calls:
                self._end_step()
            self._model_calls += 1
            if not self._global:
                return  # _end_step turned the hooks off: the step is not recorded
            self._top = module if self.recording else None
        self._push(module, name, recompute)

    @property
    def main_root(self) -> torch.nn.Module | None:
        """The model: the one given, or else the first root called that has parameters."""
        if self.model is not None:
            return self.model
        return None if self._main is None else self._main()

    def _push(self, module: torch.nn.Module, name: str | None, recompute: bool) -> None:
        kind = None
        if name is not None and self.recording and self._is_wanted(module, name):
            kind = RECOMPUTE if recompute else FORWARD
        lo = sequence_nr() if kind == FORWARD and "grad" in self.what else 0
        self._stack.append((self._next_seq() if kind else 0, name or "", kind, lo))

    def _post_hook(
        self, module: torch.nn.Module, args: Any, kwargs: Any, output: Any = _RAISED
    ) -> None:
        if not self._stack:  # a call that began before this recorder was entered
            return
        # runs also when forward raised (always_call=True)
        seq, name, kind, lo = self._stack.pop()
        if output is _RAISED and kind == RECOMPUTE:
            # checkpointing stops a recomputation (by raising) once it has what backward needs
            output = None
        try:
            if kind is not None and output is not _RAISED:  # no output when forward raised
                self._record_call(module, args, kwargs, output, seq, name, kind, lo)
            if module is self._top and not self._stack:
                self._top = None
                if self.roots:
                    self._step_records(module, name, args, kwargs, output)
        finally:
            if not self._stack:  # the outermost call is over: hook the backward of its calls
                self._taps.install()

    def _record_call(
        self,
        module: torch.nn.Module,
        args: Any,
        kwargs: Any,
        output: Any,
        seq: int,
        name: str,
        kind: str,
        lo: int,
    ) -> None:
        parent = next((n for _, n, k, _ in reversed(self._stack) if k), "")
        inputs = call_tensors(args, kwargs)
        outs = output_tensors(output)
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
        if kind == FORWARD and "grad" in what and any(t.requires_grad for _, t in outs):
            self._taps.add(
                CallBackward(self, name, parent, inputs, outs, type(module).__name__, lo)
            )

    def _step_records(
        self, module: torch.nn.Module, name: str, args: Any, kwargs: Any, output: Any
    ) -> None:
        """The "input", "params" (once per step) and "loss" records of a top-level call."""
        if self.summary == "none":
            return
        given = argument_tensors(args, kwargs)
        self._add(self._next_seq(), name, INPUT, raw=([], given), outputs=self.summaries(given))
        if self._params_step != self.step:
            self._params_step = self.step
            params: list[tuple[str, torch.Tensor]] = [
                (n, p) for n, p in module.named_parameters() if self._param_wanted(n)
            ]
            self._add(
                self._next_seq(), name, PARAMS, raw=([], params), outputs=self.summaries(params)
            )
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if output is not _RAISED and loss is not None and hasattr(loss, "dtype"):
            named = [("loss", loss)]
            self._add(self._next_seq(), name, LOSS, raw=([], named), outputs=self.summaries(named))

    def _param_wanted(self, param: str) -> bool:
        """A parameter of a module the `modules` glob picks, or of one inside such a module."""
        if self.patterns == ("*",):
            return True
        parts = param.split(".")[:-1]
        return any(
            fnmatch.fnmatchcase(".".join(parts[:i]), p)
            for i in range(len(parts), 0, -1)
            for p in self.patterns
        )

    def _hook(self, handle: Any) -> None:
        self._handles.append(handle)

    def probe(self, name: str, tensors: tuple[Any, ...]) -> None:
        named = list(named_tensors(tensors, "probe"))
        self._add(self._next_seq(), name, PROBE, raw=([], named), outputs=self.summaries(named))


def probe(name: str, *tensors: Any) -> None:
    """Record `tensors` under `name` in the running determinism check; a no-op outside one.

    Use it for values no module produces, such as the batch a data loader yields, so a data-order
    change is reported as `name` instead of as the first module that consumed the data.
    """
    for rec in _active:
        rec.probe(name, tensors)
