"""`tinykit.detect_anomalies`: stop at the first NaN/Inf in a model's forward or backward and name it.

    with tinykit.detect_anomalies(model) as det:
        for batch in batches:
            model(**batch).loss.backward()          # raises tinykit.NumericsError

It runs on the numerics `Recorder` (one hook set with `tinykit.record` and `check_determinism`,
and it stacks with them): every forward call of every module of `model`, and each module's
backward (the gradient it received and the one it passed on), is checked for NaN/Inf. The first
non-finite value, in call order, raises `NumericsError` naming the step, the module's qualified
name and the tensor ("input[0]", "output.loss", "grad input[0]": the gradient its own backward
produced), with the last `frames` frames in transformers' `DebugUnderflowOverflow` layout;
`err.report` holds the same as JSON-ready data. On CPU each record is checked as it is made (the
error comes from inside the forward or backward); on an accelerator the checks wait for the
top-level forward to return and for the backward pass to end, one host sync each.

Unlike `DebugUnderflowOverflow` it checks gradients too, keeps a bounded ring buffer (cleared,
never replaced), resets after each finding, removes its hooks on exit, and has no mutable default.
`every=k` checks every k-th step only (the sampled mode): the other steps run no per-module hook.
"""

from __future__ import annotations

import math
import warnings
import weakref
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tinykit._deprecate import old_positions
from tinykit.errors import NumericsError, NumericsWarning, UsageError
from tinykit.numerics.findings import finding, format_frames
from tinykit.numerics.recorder import Recorder, Sink
from tinykit.numerics.stats import minmax_summaries
from tinykit.numerics.summary import (
    FORWARD,
    GRAD,
    PROBE,
    RawTensors,
    Record,
    TensorSummary,
    dtype_name,
)

if TYPE_CHECKING:
    import torch

__all__ = ["AnomalyDetector", "NumericsWarning", "detect_anomalies", "format_frames"]


# (record, its raw (inputs, outputs), [(side 0/1, name, tensor, version, 0-d probe)])
Pending = tuple[Record, RawTensors, list[tuple[int, str, Any, int, Any]]]


class AnomalyDetector(Sink):
    """The context manager `detect_anomalies(model, **options)` returns; its options are
    documented there. After the block, `.anomalies` (with abort=False), `.warnings`
    (warn_above) and `.traced` (trace_steps) hold report dicts and frames."""

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        *,
        grads: bool = True,
        inf: bool = True,
        warn_above: float | None = None,
        abort: bool = True,
        frames: int = 21,
        every: int = 1,
        trace_steps: Iterable[int] = (),
        sampled: bool | None = None,
    ) -> None:
        if every < 1 or frames < 1:
            raise UsageError(
                f"detect_anomalies(every={every}, frames={frames}): both must be >= 1. "
                "Pass every=1 to check every step."
            )
        if warn_above is not None and not warn_above > 0:
            raise UsageError(f"detect_anomalies(warn_above={warn_above}) must be > 0 or None.")
        self.model, self.inf, self.warn_above, self.abort = model, inf, warn_above, abort
        self.sampled = every > 1 if sampled is None else sampled
        self.trace_steps = frozenset(trace_steps)
        self.anomalies: list[dict[str, Any]] = []
        self.warnings: list[dict[str, Any]] = []
        self.traced: dict[int, list[Record]] = {}
        self._warned: set[str] = set()
        self.frames = frames
        # records since the last check, with their raw tensors and (side, name, tensor, version,
        # 0-d probe) per floating tensor; the last `frames` checked ones stay as the tail
        self._pending: list[Pending] = []
        self._tail: deque[Pending] = deque(maxlen=frames)
        self._flags: list[Any] = []  # the 0-d probes of the pending records
        # id -> (weakref, version, probe) of the tensors probed in this forward or backward pass
        self._probes: dict[int, tuple[Any, int, Any]] = {}
        # warn_above: (index in _pending, record, name, dtype, 0-d min, 0-d max) of each output
        self._peaks: list[tuple[int, Record, str, str, Any, Any]] = []
        self._frames: list[Record] = []
        self._large: list[tuple[int, Record, str, str, float]] = []  # peaks not yet warned about
        self._callback_queued = False
        self._tripped = False
        self._found_step = -1
        what = ("input", "output", "grad") if grads else ("input", "output")
        self.recorder = Recorder(
            model=model,
            auto_steps=True,
            what=what,
            summary="none",  # the detector reduces the raw tensors itself
            frames=frames,
            steps=range(0, 1 << 62, every) if every > 1 else None,
            sink=self,
        )

    # -- context manager ------------------------------------------------------------------

    def __enter__(self) -> AnomalyDetector:
        self.recorder.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.recorder.__exit__(*exc)

    @property
    def step(self) -> int:
        return self.recorder.step

    def next_step(self) -> None:
        """End a step yourself (otherwise each top-level call of the model after the first does)."""
        self.recorder.next_step()

    def frames_text(self) -> str:
        """The last `frames` frames (of a finding, after one), in DebugUnderflowOverflow's layout."""
        return format_frames(self._frames or self._window(self._pending))

    # -- the checks -----------------------------------------------------------------------
    #
    # Each floating output of a record (its inputs, if it has no output) is reduced to ONE 0-d
    # value with no host sync: its float32 sum (`_reduce`). On an accelerator the values are
    # checked together, one host sync, when the model's top-level forward returns and when a
    # backward pass ends, and the tensors are held until then; on CPU, where reading a value
    # costs no sync, each record is checked as it comes and only the last `frames` records are
    # held. Only on a finding are the offending record located in call order, its inputs looked
    # at, and abs-min / abs-max computed for the frames of the report.

    def on_record(self, rec: Recorder, record: Record, tensors: RawTensors) -> None:
        if self._tripped:
            return
        if record.step in self.trace_steps:
            self.traced.setdefault(record.step, []).append(record)
        # The outputs are reduced (the inputs only of a record without any): a non-finite input
        # gives a non-finite output, and only then are the inputs looked at (`_locate`), to
        # tell a value that arrived bad from one the module made. Most inputs are an earlier
        # record's outputs, whose reductions are reused (`_probe`).
        floats = [
            [(n, t) for n, t in named if t.is_floating_point() and t.numel()] for named in tensors
        ]
        reduced = 1 if floats[1] else 0
        entries = [
            (side, name, t, t._version, self._probe(t, side == reduced))
            for side in (0, 1)
            for name, t in floats[side]
        ]
        if self.warn_above is not None and record.kind == FORWARD:
            for name, t in tensors[1]:
                if t.is_floating_point() and t.numel():
                    import torch

                    where = len(self._pending)  # the index of this record in the check
                    self._peaks.append(
                        (where, record, name, dtype_name(t), *torch.aminmax(t.detach()))
                    )
        pending = (record, tensors, entries)
        self._pending.append(pending)
        if entries and entries[0][2].is_cpu:
            # No device to wait for, so check now and let go of the tensors: holding a whole
            # backward's gradients until it ends costs fresh memory (page faults) for each,
            # ~20% of a step on CPU. Only the last `frames` records stay, for the report.
            if (
                len(self._pending) == 1
                and not self._peaks
                and record.step not in self.trace_steps  # its frames are resolved in _check
                and all(math.isfinite(f.item()) for f in self._flags)
            ):
                self._pending, self._flags = [], []  # the common case, in short
                self._tail.append(pending)
            else:
                self._check(end=False)
        if record.kind == GRAD and not self._callback_queued:
            from torch.autograd import Variable

            # runs when this backward pass has finished: the check of its records
            Variable._execution_engine.queue_callback(self._check)
            self._callback_queued = True
        elif record.kind in (FORWARD, PROBE) and not rec._stack:
            self._check()  # the top-level forward (or a probe outside one) is over

    def on_step(self, rec: Recorder, step: int) -> None:
        self._check()

    def _probe(self, t: torch.Tensor, compute: bool = True) -> Any:
        """The 0-d float32 value of `t` that is non-finite iff an element is (see above); None
        when not `compute` and not known already."""
        key = id(t)
        known = self._probes.get(key)
        if known is not None and known[0]() is t and known[1] == t._version:
            return known[2]  # the unchanged output of the previous module, now an input
        if not compute:
            return None
        value = _reduce(t)
        self._probes[key] = (weakref.ref(t), t._version, value)
        self._flags.append(value)
        return value

    def _check(self, end: bool = True) -> None:
        """Check the pending records; `end`: a forward or backward pass is over."""
        import torch

        if end:
            self._callback_queued = False
            self._probes = {}
        pending, flags, peaks = self._pending, self._flags, self._peaks
        self._pending, self._flags, self._peaks = [], [], []
        self._large = []
        if self._tripped or not pending:
            return
        if len(flags) == 1:
            values = [flags[0].item()]
        else:
            values = torch.stack([f.float() for f in flags]).tolist() if flags else []
        if peaks:  # the check's second host sync, only with warn_above
            peak_values = torch.stack([v.float() for p in peaks for v in p[4:]]).tolist()
            self._large = [
                (where, record, name, dtype, max(-peak_values[2 * j], peak_values[2 * j + 1]))
                for j, (where, record, name, dtype, _, _) in enumerate(peaks)
            ]
        try:
            if not math.isfinite(sum(values)):
                self._locate(pending)
            self._check_large(len(pending))
        finally:
            for record, _, _ in pending:
                if record.step in self.trace_steps:
                    self._resolve(record, pending)
            self._tail.extend(pending)

    def _locate(self, pending: list[Pending]) -> None:
        """The first tensor, in call order, that is really NaN (or Inf): report it."""
        for i, (record, tensors, entries) in enumerate(pending):
            if record.step == self._found_step:
                continue  # what follows a finding in its step is its consequence, not a new one
            if all(v is None or math.isfinite(v.item()) for *_, v in entries):
                continue
            for side, name, t, version, value in entries:
                if value is None:  # an input not reduced yet: reduce it now
                    value = _reduce(t)
                if math.isfinite(value.item()):
                    continue
                if t._version == version:  # not changed in place since: verify on the tensor
                    d = t.detach()
                    if not bool(d.isnan().any() if not self.inf else ~d.isfinite().all()):
                        continue  # finite values whose sum overflowed
                elif not self.inf and not math.isnan(value.item()):
                    continue
                bad = minmax_summaries([(name, t)], {})[0]
                if not self._bad(bad):
                    continue
                self._check_large(i + 1)  # warnings about earlier calls come first
                self._frames = self._window(pending[: i + 1])
                raw = dict(tensors[0] + tensors[1])
                self._found(record, bad, t, is_input=side == 0, raw=raw)
                break

    def _window(self, upto: list[Pending]) -> list[Record]:
        """The last `frames` records up to the finding, with their abs-min / abs-max."""
        window = [*self._tail, *upto][-self.frames :]
        for record, tensors, _ in window:
            self._resolve(record, [(record, tensors, [])])
        return [r for r, _, _ in window]

    @staticmethod
    def _resolve(record: Record, pending: list[Pending]) -> None:
        for r, tensors, _ in pending:
            if r is record and not (record.inputs or record.outputs):
                record.inputs = minmax_summaries(tensors[0], {})
                record.outputs = minmax_summaries(tensors[1], {})

    def _bad(self, s: TensorSummary) -> bool:
        return bool(s.nan or (self.inf and (s.posinf or s.neginf)))

    def _check_large(self, upto: int) -> None:
        """Warn about the outputs past warn_above among the first `upto` records of the check."""
        while self._large and self._large[0][0] < upto:
            _, record, name, dtype, absmax = self._large.pop(0)
            assert self.warn_above is not None
            if absmax > self.warn_above and record.module not in self._warned:
                self._warned.add(record.module)
                item = {
                    "step": record.step,
                    "module": record.module,
                    "class": record.cls,
                    "tensor": name,
                    "absmax": absmax,
                    "dtype": dtype,
                }
                self.warnings.append(item)
                limit = " (float16 overflows past 65504)" if dtype == "float16" else ""
                warnings.warn(
                    f"tinykit: '{record.module}' ({record.cls}) {name} reaches |x| = "
                    f"{absmax:.3g} > warn_above={self.warn_above:g} at step {record.step}"
                    f"{limit}",
                    NumericsWarning,
                    stacklevel=2,
                )

    def _found(
        self,
        record: Record,
        bad: TensorSummary,
        tensor: torch.Tensor | None,
        is_input: bool,
        raw: dict[str, torch.Tensor],
    ) -> None:
        module = self._module(record.module)
        self._report(
            *finding(record, bad, tensor, is_input, raw, self._frames, module, self._module)
        )

    def _report(self, report: dict[str, Any], message: str) -> None:
        self._found_step = report["step"]
        if self.abort:
            self._tripped = True  # once raised, the unwinding calls are not findings
            raise NumericsError(message, report=report)
        self.anomalies.append(report)
        warnings.warn(f"tinykit: {message.splitlines()[0]}", NumericsWarning, stacklevel=2)

    def _module(self, name: str) -> torch.nn.Module | None:
        """The module a record names (without a model: the one the recorder named so)."""
        if self.model is None:
            found = [m for m, n in self.recorder._names.items() if n == name]
            return found[0] if found else None
        if name == type(self.model).__name__:
            return self.model
        try:
            return self.model.get_submodule(name)
        except AttributeError:
            return None


def _reduce(t: torch.Tensor) -> Any:
    """Its float32 sum (float64 for float64): non-finite iff an element is, or rarely when
    finite values overflow the sum (a suspect `_locate` verifies on the tensor)."""
    import torch

    d = t.detach()
    return torch.sum(d, dtype=torch.float64 if d.dtype == torch.float64 else torch.float32)


@old_positions("model", "grads", "inf", "warn_above", "abort", "frames", "every")
def detect_anomalies(model: torch.nn.Module | None = None, **options: Any) -> AnomalyDetector:
    """Watch `model`'s forward and backward for NaN (and Inf) values: returns the running
    `AnomalyDetector(model, **options)`, whose keyword-only parameters are the one list of the
    options and their defaults.

    Args:
        model: the module whose submodules are watched; each top-level call after the first
            starts a new step (or call `det.next_step()` yourself, e.g. once per optimizer step).
            None (`with tinykit.detect_anomalies():`) watches every module called inside the
            block, a model built inside code you cannot change included; the first root module
            with parameters counts the steps (what the pytest marker does).
        grads: also check every module's backward (the gradient received and passed on).
        inf: treat +-Inf as an anomaly too (False: NaN only).
        warn_above: warn (NumericsWarning, and `det.warnings`) the first time a module's output
            exceeds this |x|; 1e4 flags float16 activations heading for 65504.
        abort: raise at the first finding; False collects them in `det.anomalies`.
        frames: how many frames (module calls) the report shows: a ring buffer.
        every: check only every k-th step; k > 1 uses the sampled mode.
        trace_steps: steps whose every frame is kept in `det.traced[step]`.
        sampled: kept for compatibility: every mode makes one fused finite check per output
            (one host sync per forward and per backward on an accelerator), with the full report.

    Raises:
        NumericsError: at the first NaN/Inf, with `.report` (a JSON-ready dict).
    """
    return AnomalyDetector(model, **options)
