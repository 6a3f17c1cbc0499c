"""What `detect_anomalies` says about a finding: the frames in `DebugUnderflowOverflow`'s layout,
the JSON-ready report, the one-paragraph message, and a hint at the likely cause (all labels
masked, float16 overflow, a non-finite parameter)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tinykit.numerics.summary import FORWARD, GRAD, RECOMPUTE, Record, TensorSummary

if TYPE_CHECKING:
    import torch

FP16_MAX = 65504.0


def format_frames(records: Iterable[Record]) -> str:
    """Frames in `DebugUnderflowOverflow`'s layout: a header per call, then `absmin absmax name`."""
    lines = [" abs min  abs max  metadata"]
    for r in records:
        where = " (backward)" if r.kind == GRAD else " (recompute)" if r.kind == RECOMPUTE else ""
        lines.append(f"{'':17} {r.module} {r.cls}{where}")
        for s in [*r.params, *r.inputs, *r.outputs]:
            if s.absmax is None:
                lines.append(f"{'not a float':>17} {s.name}")
            else:
                flags = f" {s.flags()}" if s.flags() else ""
                lines.append(f"{s.absmin:8.2e} {s.absmax:8.2e} {s.name}{flags}")
    return "\n".join(lines)


def frame_data(r: Record) -> dict[str, Any]:
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


def finding(
    record: Record,
    bad: TensorSummary,
    tensor: torch.Tensor | None,
    is_input: bool,
    raw: dict[str, torch.Tensor],
    frames: list[Record],
    module: torch.nn.Module | None,
    lookup: Callable[[str], torch.nn.Module | None] = lambda _: None,
) -> tuple[dict[str, Any], str]:
    """The report (JSON-ready) and the message of a finding: `bad` in `record`, with the frames
    before it and the module it names (for the hint about its parameters); `lookup` finds
    another module by name (the ones whose weights an overflow hint shows)."""
    numel = 1
    for d in bad.shape:
        numel *= d
    found = [(bad.nan, "NaN"), (bad.posinf, "+Inf"), (bad.neginf, "-Inf")]
    what = " and ".join(f"{label} ({n} of {numel})" for n, label in found if n)
    backward = record.kind == GRAD
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
    if bad.dtype == "float16" and (bad.posinf or bad.neginf):
        hint, extra = _overflow_hint(record, is_input, module, frames, lookup)
    else:
        hint, extra = _hint(record, bad, is_input, raw, module)
    index = first_non_finite(tensor) if tensor is not None else None
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
        "frames": [frame_data(r) for r in frames],
    }
    message = (
        f"{what} in {bad.name} of {where} at step {record.step}: the {kind} {why}"
        f"{f' (first at index {tuple(index)})' if index else ''}. {hint}\n"
        f"Detected inf/nan during step={record.step}\n"
        f"Last {len(frames)} frames:\n{format_frames(frames)}"
    )
    return report, message


def _hint(
    record: Record,
    bad: TensorSummary,
    is_input: bool,
    raw: dict[str, torch.Tensor],
    module: torch.nn.Module | None,
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
    if not is_input and record.kind == FORWARD and module is not None:
        for name, p in module.named_parameters(recurse=False):
            if not bool(p.detach().isfinite().all()):
                at = first_non_finite(p) or []
                return (
                    f"Its parameter '{name}' is not finite (first at index {tuple(at)}): "
                    "an earlier update or the loaded weights put it there."
                ), {"parameter": name, "parameter_index": at}
    return "", {}


def _overflow_hint(
    record: Record,
    is_input: bool,
    module: torch.nn.Module | None,
    frames: list[Record],
    lookup: Callable[[str], torch.nn.Module | None],
) -> tuple[str, dict[str, Any]]:
    """float16 overflow: the ranges of what the code that made the value read, as
    DebugUnderflowOverflow's frames show them. A module's output: its inputs (for a backward,
    the gradient it received) and its own weights. A value made between modules (`act(gate) *
    up` in an MLP's forward): the outputs and weights of the modules its parent called before
    it, in this step, which are the operands."""
    if is_input:
        operands = [
            f
            for f in frames[:-1]
            if f.parent == record.parent and f.step == record.step and f.kind == FORWARD
        ]
        parts = [
            _ranges(f.module, [s for s in f.outputs if s.finite], lookup(f.module))
            for f in operands[-4:]
        ]
        made = f"made in the forward of '{record.parent or 'the caller'}'"
        where = f"'{record.module}' received it, {made}" + (
            f" from {'; '.join(p for p in parts if p)}" if any(parts) else ""
        )
        ranges = {f.module: _range_data(f.outputs) for f in operands[-4:]}
    else:
        where = f"'{record.module}' made it from " + (
            _ranges("", record.inputs, module) or "no float tensor"
        )
        ranges = {record.module: _range_data(record.inputs)}
    return (
        f"float16 overflows past {FP16_MAX:g}: {where}. Run this code in float32 (or bfloat16), "
        "scale its inputs or weights down, or keep activations well below 1e4."
    ), {"cause": "float16 overflow", "ranges": ranges}


def _ranges(name: str, tensors: list[TensorSummary], module: torch.nn.Module | None) -> str:
    """ "name output |x| in [lo, hi], weight |x| in [lo, hi]": abs-min and abs-max, as in frames."""
    from tinykit.numerics.stats import minmax_summaries

    weights = minmax_summaries(list(module.named_parameters(recurse=False)), {}) if module else []
    shown = [
        f"{s.name} |x| in [{s.absmin:.3g}, {s.absmax:.3g}]"
        for s in [*tensors, *weights]
        if s.absmax is not None and s.absmin is not None
    ]
    return f"{name} " * bool(name and shown) + ", ".join(shown)


def _range_data(tensors: list[TensorSummary]) -> dict[str, list[float | None]]:
    return {s.name: [s.absmin, s.absmax] for s in tensors if s.absmax is not None}


def first_non_finite(t: torch.Tensor) -> list[int] | None:
    bad = (~t.detach().isfinite()).nonzero()
    return [int(i) for i in bad[0]] if len(bad) else None
