"""`tinykit.detect_anomalies`: stop at the first NaN/Inf in a model's forward or backward and name it.

    with tinykit.detect_anomalies(model) as det:
        for batch in batches:
            model(**batch).loss.backward()          # raises tinykit.NumericsError

It runs on the numerics `Recorder` (one hook set with `tinykit.record` and `check_determinism`,
and it stacks with them): every forward call of every module of `model` is summarised as abs-min
/ abs-max of its inputs and outputs (one host sync per call), and each module's backward as the
gradient it received and the one it passed on. The first non-finite value raises `NumericsError`
naming the step, the module's qualified name and the tensor ("input[0]", "output.loss",
"grad input[0]": the gradient its own backward produced), with the last `frames` frames in
transformers' `DebugUnderflowOverflow` layout; `err.report` holds the same as JSON-ready data.

Unlike `DebugUnderflowOverflow` it checks gradients too, keeps a bounded ring buffer (cleared,
never replaced), resets after each finding, removes its hooks on exit, and has no mutable default.
`every=k` (or `sampled=True`) checks every k-th step only, one fused finite check per module call
and one host sync per step, for long runs.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tinykit.errors import NumericsError, UsageError
from tinykit.numerics.record import RawTensors, Record, Recorder, Sink, TensorSummary

if TYPE_CHECKING:
    import torch

__all__ = ["AnomalyDetector", "NumericsWarning", "detect_anomalies", "format_frames"]

FP16_MAX = 65504.0


class NumericsWarning(UserWarning):
    """An activation approaches overflow (`warn_above`), or a finding when `abort=False`."""


def format_frames(records: Iterable[Record]) -> str:
    """Frames in `DebugUnderflowOverflow`'s layout: a header per call, then `absmin absmax name`."""
    lines = [" abs min  abs max  metadata"]
    for r in records:
        where = (
            " (backward)" if r.kind == "grad" else " (recompute)" if r.kind == "recompute" else ""
        )
        lines.append(f"{'':17} {r.module} {r.cls}{where}")
        for s in [*r.params, *r.inputs, *r.outputs]:
            if s.absmax is None:
                lines.append(f"{'not a float':>17} {s.name}")
            else:
                flags = f" {s.flags()}" if s.flags() else ""
                lines.append(f"{s.absmin:8.2e} {s.absmax:8.2e} {s.name}{flags}")
    return "\n".join(lines)


def _frame_data(r: Record) -> dict[str, Any]:
    def tensor(s: TensorSummary) -> dict[str, Any]:
        return {
            "name": s.name,
            "shape": list(s.shape),
            "dtype": s.dtype,
            "absmin": s.absmin,
            "absmax": s.absmax,
            "nan": s.nan,
            "posinf": s.posinf,
            "neginf": s.neginf,
        }

    return {
        "module": r.module,
        "class": r.cls,
        "kind": r.kind,
        "call": r.call,
        "step": r.step,
        "tensors": [tensor(s) for s in [*r.params, *r.inputs, *r.outputs]],
    }


class AnomalyDetector(Sink):
    """The context manager `detect_anomalies` returns; see there. After the block,
    `.anomalies` (with abort=False), `.warnings` (warn_above) and `.traced` (trace_steps) hold
    report dicts and frames."""

    def __init__(
        self,
        model: torch.nn.Module | None,
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
        self._pending: list[tuple[Record, Any]] = []  # sampled mode: (record, finite flag)
        self._tripped = False
        self._found_step = -1
        what = ("input", "output", "grad") if grads else ("input", "output")
        self.recorder = Recorder(
            model=model,
            auto_steps=True,
            what=what,
            summary="none" if self.sampled else "minmax",
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
        return format_frames(self.recorder.records)

    # -- the checks -----------------------------------------------------------------------

    def on_record(self, rec: Recorder, record: Record, tensors: RawTensors) -> None:
        if self._tripped:
            return
        if record.step in self.trace_steps:
            self.traced.setdefault(record.step, []).append(record)
        if self.sampled:
            self._pending.append((record, _fused_finite_flag(tensors)))
            return
        if record.step == self._found_step:
            return  # what follows a finding in its step is its consequence, not a new one
        inputs, outputs = record.inputs, record.outputs
        bad_in = next((s for s in inputs if self._bad(s)), None)
        bad_out = next((s for s in outputs if self._bad(s)), None)
        if bad_in is not None or bad_out is not None:
            raw = dict(tensors[0] + tensors[1])
            bad = bad_in if bad_in is not None else bad_out
            assert bad is not None
            self._found(record, bad, raw.get(bad.name), is_input=bad_in is not None, raw=raw)
        elif self.warn_above is not None and record.kind == "forward":
            self._check_large(record)

    def on_step(self, rec: Recorder, step: int) -> None:
        if not self._pending or self._tripped:
            self._pending.clear()
            return
        import torch

        pending, self._pending = self._pending, []
        flags = torch.stack([f for _, f in pending]).tolist()  # the one host sync of the step
        for (record, _), ok in zip(pending, flags, strict=True):
            if not ok:
                self._found_sampled(record, step)
                return

    def _bad(self, s: TensorSummary) -> bool:
        return bool(s.nan or (self.inf and (s.posinf or s.neginf)))

    def _check_large(self, record: Record) -> None:
        assert self.warn_above is not None
        for s in record.outputs:
            if (
                s.absmax is not None
                and s.absmax > self.warn_above
                and record.module not in (self._warned)
            ):
                self._warned.add(record.module)
                item = {
                    "step": record.step,
                    "module": record.module,
                    "class": record.cls,
                    "tensor": s.name,
                    "absmax": s.absmax,
                    "dtype": s.dtype,
                }
                self.warnings.append(item)
                limit = " (float16 overflows past 65504)" if s.dtype == "float16" else ""
                warnings.warn(
                    f"tinykit: '{record.module}' ({record.cls}) {s.name} reaches |x| = "
                    f"{s.absmax:.3g} > warn_above={self.warn_above:g} at step {record.step}"
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
        numel = 1
        for d in bad.shape:
            numel *= d
        found = [(bad.nan, "NaN"), (bad.posinf, "+Inf"), (bad.neginf, "-Inf")]
        what = " and ".join(f"{label} ({n} of {numel})" for n, label in found if n)
        backward = record.kind == "grad"
        if backward:
            kind = "gradient received" if is_input else "gradient passed on"
            why = (
                "arrived already non-finite from the layers after it (an operation between "
                "modules made it)"
                if is_input
                else "was made non-finite by its own backward from a finite gradient of its output"
            )
        else:
            kind = "input" if is_input else "output"
            why = (
                "was non-finite before this module ran: code between modules (in the forward of "
                f"'{record.parent or 'the caller'}') made it, as every module output before it "
                "was finite"
                if is_input
                else "went non-finite while its inputs were finite"
            )
        where = f"'{record.module}' ({record.cls}{', backward' if backward else ''})"
        hint, extra = self._hint(record, bad, is_input, raw)
        index = _first_non_finite(tensor) if tensor is not None else None
        report = {
            "step": record.step,
            "module": record.module,
            "class": record.cls,
            "pass": "backward" if backward else record.kind,
            "kind": kind,
            "tensor": bad.name,
            "shape": list(bad.shape),
            "dtype": bad.dtype,
            "nan": bad.nan,
            "posinf": bad.posinf,
            "neginf": bad.neginf,
            "first_index": index,
            "hint": hint,
            # the module whose code made the value: a non-finite forward input was made in the
            # forward of the module that called this one
            "made_by": record.parent if is_input and not backward else record.module,
            **extra,
            "frames": [_frame_data(r) for r in self.recorder.records],
        }
        message = (
            f"{what} in {bad.name} of {where} at step {record.step}: the {kind} {why}"
            f"{f' (first at index {tuple(index)})' if index else ''}. {hint}\n"
            f"Detected inf/nan during step={record.step}\n"
            f"Last {len(self.recorder.records)} frames:\n{self.frames_text()}"
        )
        self._report(report, message)

    def _found_sampled(self, record: Record, step: int) -> None:
        pass_ = "backward" if record.kind == "grad" else record.kind
        report = {
            "step": record.step,
            "module": record.module,
            "class": record.cls,
            "pass": pass_,
            "kind": "gradient" if pass_ == "backward" else "input or output",
            "tensor": None,
            "hint": f"Rerun with every=1 and trace_steps=[{record.step}] for the tensor and frames.",
            "frames": [],
        }
        message = (
            f"a NaN or Inf in '{record.module}' ({record.cls}, {pass_}) at step {record.step} "
            f"(sampled check). {report['hint']}"
        )
        self._report(report, message)

    def _report(self, report: dict[str, Any], message: str) -> None:
        self._found_step = report["step"]
        if self.abort:
            self._tripped = True  # once raised, the unwinding calls are not findings
            raise NumericsError(message, report=report)
        self.anomalies.append(report)
        warnings.warn(f"tinykit: {message.splitlines()[0]}", NumericsWarning, stacklevel=2)

    def _hint(
        self,
        record: Record,
        bad: TensorSummary,
        is_input: bool,
        raw: dict[str, torch.Tensor],
    ) -> tuple[str, dict[str, Any]]:
        """A likely cause, and report fields that back it."""
        labels = raw.get("input.labels")
        if (
            not is_input
            and "loss" in bad.name
            and labels is not None
            and not labels.is_floating_point()
            and bool((labels == -100).all())
        ):
            return (
                "Every label is -100 (masked), so the mean loss is 0/0 = NaN: skip such "
                "batches, or use loss = logits.sum() * 0.0 for them."
            ), {"cause": "all labels masked"}
        if bad.dtype == "float16" and (bad.posinf or bad.neginf):
            peak = max(
                (s.absmax for s in record.inputs if s.absmax is not None and s.finite),
                default=0.0,
            )
            return (
                f"float16 overflows past {FP16_MAX:g} (finite inputs' abs max {peak:.3g}): run this "
                "module in float32 (or bfloat16), or keep activations well below 1e4."
            ), {"cause": "float16 overflow"}
        if not is_input and record.kind == "forward":
            module = self._module(record.module)
            if module is not None:
                for name, p in module.named_parameters(recurse=False):
                    if not bool(p.detach().isfinite().all()):
                        at = _first_non_finite(p) or []
                        return (
                            f"Its parameter '{name}' is not finite (first at index {tuple(at)}): "
                            "an earlier update or the loaded weights put it there."
                        ), {"parameter": name, "parameter_index": at}
        return "", {}

    def _module(self, name: str) -> torch.nn.Module | None:
        if self.model is None:
            return None
        if name == type(self.model).__name__:
            return self.model
        try:
            return self.model.get_submodule(name)
        except AttributeError:
            return None


def _fused_finite_flag(tensors: RawTensors) -> Any:
    """One 0-d bool tensor: are all floats of this call finite? No host sync here."""
    import torch

    floats = [t.detach() for _, t in tensors[0] + tensors[1] if t.is_floating_point()]
    if not floats:
        return torch.tensor(True)
    return torch.stack([t.isfinite().all() for t in floats]).all()


def _first_non_finite(t: torch.Tensor) -> list[int] | None:
    bad = (~t.detach().isfinite()).nonzero()
    return [int(i) for i in bad[0]] if len(bad) else None


def detect_anomalies(
    model: torch.nn.Module | None,
    grads: bool = True,
    inf: bool = True,
    warn_above: float | None = None,
    abort: bool = True,
    frames: int = 21,
    every: int = 1,
    *,
    trace_steps: Iterable[int] = (),
    sampled: bool | None = None,
) -> AnomalyDetector:
    """Watch `model`'s forward and backward for NaN (and Inf) values.

    Args:
        model: the module whose submodules are watched; each top-level call after the first
            starts a new step (or call `det.next_step()` yourself, e.g. once per optimizer step).
            None watches every module called (what the pytest marker does).
        grads: also check every module's backward (the gradient received and passed on).
        inf: treat +-Inf as an anomaly too (False: NaN only).
        warn_above: warn (NumericsWarning, and `det.warnings`) the first time a module's output
            exceeds this |x|; 1e4 flags float16 activations heading for 65504.
        abort: raise at the first finding; False collects them in `det.anomalies`.
        frames: how many frames (module calls) the report shows: a ring buffer.
        every: check only every k-th step; k > 1 uses the sampled mode.
        trace_steps: steps whose every frame is kept in `det.traced[step]`.
        sampled: one fused finite check per module call and one host sync per step; the report
            then names the module and step but not the tensor (default: every > 1).

    Raises:
        NumericsError: at the first NaN/Inf, with `.report` (a JSON-ready dict).
    """
    return AnomalyDetector(
        model, grads, inf, warn_above, abort, frames, every, trace_steps, sampled
    )
