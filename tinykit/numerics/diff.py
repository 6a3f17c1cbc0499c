"""`tinykit.diff_dumps(a, b)`: align two recordings and name the first divergence.

Records are aligned by (module, kind, step) in the order they completed, with difflib's
matcher, so an extra or a missing call in one run is reported and the rest still pairs up.
Each pair is compared tensor by tensor with the one comparer (`compare.compare_tensors`: full
tensors within rtol/atol, assert_close's per-dtype defaults) or, for stats-only dumps, by hash.

The root cause is searched step by step. A step's own records come first: the tensors its
top-level calls were given ("input": a data or label bug), then the parameters as it began
("params": initialisation, loading, or the optimizer step before it). Then its module records
in completion order: the first whose output differs while its inputs (and the step's
parameters) matched (a leaf completes before the container that called it, so the innermost
module is named). Records whose inputs already differed are downstream of it, and the
containers around it are marked.

Steps are paired by number, after `align_steps=(A, B)` (step A of `a` is step B of `b`; a run
resumed at step 4 without `first_step` is `(4, 0)`). A dump that starts later (a resumed run)
is compared on the steps both hold; the leading steps only one holds are listed, not counted
as a difference.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from tinykit.errors import UsageError
from tinykit.numerics.compare import compare_tensors, tolerances
from tinykit.numerics.dumps import Dump, read_dump
from tinykit.numerics.summary import GRAD, INPUT, LOSS, PARAMS

__all__ = ["DumpDiff", "RecordDiff", "diff_dumps"]

# the order a step's records are searched in: its inputs, its parameters, then the rest
_FIRST = {INPUT: 0, PARAMS: 1}


@dataclass
class Side:
    """How the tensors of one side (inputs or outputs) of a pair of records compare."""

    same: bool = True
    max_abs: float | None = None
    max_rel: float | None = None
    detail: str = ""  # assert_close-style lines for the worst tensor
    first: str = ""  # the first tensor that differs
    mismatched: int | None = None  # its differing elements, when its values were kept
    total: int | None = None
    differing: int = 0  # how many tensors differ


@dataclass
class RecordDiff:
    """One aligned pair of records. status: match | root | contains-root | downstream | differs."""

    module: str
    cls: str
    kind: str
    call: int
    step: int
    status: str
    inputs_match: bool
    outputs_match: bool
    max_abs: float | None = None
    max_rel: float | None = None
    detail: str = ""  # assert_close-style lines for the worst output tensor
    tensor: str = ""  # the first output tensor that differs ("labels", a parameter's name)
    mismatched: int | None = None  # its differing elements (None: compared by hash)
    total: int | None = None
    tensors_differing: int = 0
    tensors: int = 0
    step_b: int | None = None  # b's own number of the step, when the steps were aligned

    def label(self) -> str:
        step = f"step {self.step}" + (
            f" (b's step {self.step_b})" if self.step_b not in (None, self.step) else ""
        )
        return f"'{self.module}' ({self.cls}, {self.kind} call {self.call}, {step})"

    def elements(self) -> str:
        if self.mismatched is None:
            return "hashes differ"
        return f"{self.mismatched} of {self.total} elements"

    def cause(self, has_params: bool) -> str:
        """The headline sentence for this record as the root cause."""
        if self.kind == INPUT:
            return (
                f"input '{self.tensor}' of the top-level call at step {self.step} differs "
                f"({self.elements()}): the data fed to the model changed (its order or content, "
                "or how it was prepared: label shifting, masking, padding, collation)."
            )
        if self.kind == PARAMS:
            others = (
                f"; {self.tensors_differing} of {self.tensors} parameters differ"
                if self.tensors_differing > 1
                else ""
            )
            why = (
                "the model was initialised or loaded differently"
                if self.call == 0
                else "the update before this step differed (learning rate, optimizer state, "
                "gradients), or something changed the weights between steps"
            )
            return (
                f"parameter '{self.tensor}' differs at the start of step {self.step} "
                f"({self.elements()}{others}), before any module used it: {why}."
            )
        matched = "its inputs and the step's parameters" if has_params else "its inputs"
        return f"{self.label()}: its output differs while {matched} matched."


@dataclass
class DumpDiff:
    """The result of `diff_dumps`: `equal`, the `root` cause, every pair in execution order."""

    a: str
    b: str
    rtol: float | None
    atol: float | None
    equal: bool
    root: RecordDiff | None
    rows: list[RecordDiff] = field(default_factory=list)
    only_in_a: list[str] = field(default_factory=list)  # "module (kind call N, step S)"
    only_in_b: list[str] = field(default_factory=list)
    align_steps: tuple[int, int] | None = None
    steps_left_out: list[str] = field(default_factory=list)  # "a: steps 0-3" (not compared)
    loss: str = ""  # where the loss first differs, with both values
    has_params: bool = False  # the dumps hold each step's parameters

    @property
    def downstream(self) -> list[RecordDiff]:
        return [r for r in self.rows if r.status == "downstream"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        lines = []
        if self.equal:
            lines.append(f"no divergence: {len(self.rows)} records of {self.a} and {self.b} match")
        elif self.root is not None:
            lines.append(f"first divergence: {self.root.cause(self.has_params)} {self.root.detail}")
        else:
            first = next((r for r in self.rows if r.status != "match"), None)
            lines.append(
                "no root cause: "
                + (
                    f"the inputs of {first.label()} already differ"
                    if first
                    else "the records differ only in extra or missing calls"
                )
            )
        if self.loss:
            lines.append(self.loss)
        if self.downstream:
            lines.append(
                f"downstream (inputs already differed): {len(self.downstream)} records, first "
                f"{self.downstream[0].label()}"
            )
        for side, extra in (("a", self.only_in_a), ("b", self.only_in_b)):
            if extra:
                more = f" and {len(extra) - 5} more" if len(extra) > 5 else ""
                lines.append(f"only in {side}: {', '.join(extra[:5])}{more}")
        if self.steps_left_out:
            lines.append(f"not compared (one dump only): {'; '.join(self.steps_left_out)}")
        lines.append(f"{'status':<14} {'max abs':>9} {'max rel':>9}  record (execution order)")
        for r in self.rows:
            mx = "-" if r.max_abs is None else f"{r.max_abs:.3g}"
            rel = "-" if r.max_rel is None else f"{r.max_rel:.3g}"
            lines.append(f"{r.status:<14} {mx:>9} {rel:>9}  {r.label()}")
        return "\n".join(lines)


def _tag(r: dict[str, Any]) -> tuple[str, str, int]:
    return (r["module"], r["kind"], r["step"])


def _where(r: dict[str, Any]) -> str:
    return f"{r['module']} ({r['kind']} call {r['call']}, step {r['step']})"


def _compare_side(
    da: Dump, db: Dump, xs: list[dict], ys: list[dict], rtol: float | None, atol: float | None
) -> Side:
    if len(xs) != len(ys):
        return Side(False, detail=f"{len(xs)} tensors against {len(ys)}", differing=1)
    side, worst = Side(), -1.0
    for x, y in zip(xs, ys, strict=True):
        if x["shape"] != y["shape"] or x["dtype"] != y["dtype"]:
            _differs(side, x["name"], None, None)
            side.detail = side.detail or (
                f"{x['name']}: {x['dtype']}{x['shape']} against {y['dtype']}{y['shape']}"
            )
            continue
        ta, tb = da.tensor(x), db.tensor(y)
        if ta is None or tb is None:  # stats only: bitwise by hash
            if x["hash"] != y["hash"]:
                _differs(side, x["name"], None, None)
                side.detail = side.detail or (
                    f"{x['name']}: hashes differ (mean {x['mean']} vs {y['mean']}, absmax "
                    f"{x['absmax']} vs {y['absmax']}); record with tensors='full' for "
                    "elementwise errors"
                )
            continue
        r_default, a_default = tolerances(x["dtype"])
        diff = compare_tensors(
            tb,
            ta,
            rtol=r_default if rtol is None else rtol,
            atol=a_default if atol is None else atol,
        )
        side.max_abs = max(side.max_abs or 0.0, diff.max_abs)
        side.max_rel = max(side.max_rel or 0.0, diff.max_rel)
        if not diff.equal:
            _differs(side, x["name"], diff.mismatched, diff.total)
            if diff.max_abs > worst:
                worst = diff.max_abs
                side.detail = f"{x['name']}: {diff.describe()}"
    return side


def _differs(side: Side, name: str, mismatched: int | None, total: int | None) -> None:
    if side.same:
        side.same, side.first, side.mismatched, side.total = False, name, mismatched, total
    side.differing += 1


def _steps(records: list[dict[str, Any]]) -> tuple[int, int] | None:
    steps = [r["step"] for r in records]
    return (min(steps), max(steps)) if steps else None


def _span(lo: int, hi: int) -> str:
    return f"step {lo}" if lo == hi else f"steps {lo}-{hi}"


def diff_dumps(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    rtol: float | None = None,
    atol: float | None = None,
    *,
    align_steps: tuple[int, int] | None = None,
) -> DumpDiff:
    """Compare two dumps written by `tinykit.record(..., out=DIR)`; `a` is the reference.

    `align_steps=(A, B)`: step A of `a` is compared with step B of `b` (and so on).

    Raises:
        UsageError: a folder is not a dump, is truncated, the dumps are of different models,
            or they share no step.
    """
    da, db = read_dump(a), read_dump(b)
    ma, mb = da.manifest["model"], db.manifest["model"]
    if ma.get("fingerprint") != mb.get("fingerprint"):
        raise UsageError(
            f"'{a}' and '{b}' are dumps of different models ({ma.get('class')} with "
            f"{ma.get('parameters')} parameters against {mb.get('class')} with "
            f"{mb.get('parameters')}; parameter names or shapes differ). Compare recordings of "
            "one model."
        )
    records_a, records_b, left_out = _aligned(str(a), str(b), da, db, align_steps)
    matcher = difflib.SequenceMatcher(
        None, [_tag(r) for r in records_a], [_tag(r) for r in records_b], autojunk=False
    )
    result = DumpDiff(str(a), str(b), rtol, atol, equal=True, root=None, align_steps=align_steps)
    result.steps_left_out = left_out
    result.has_params = any(r["kind"] == PARAMS for r in records_a)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op != "equal":
            result.only_in_a += [_where(r) for r in records_a[i1:i2]]
            result.only_in_b += [_where(r) for r in records_b[j1:j2]]
            continue
        for ra, rb in zip(records_a[i1:i2], records_b[j1:j2], strict=True):
            ins = _compare_side(da, db, ra["inputs"], rb["inputs"], rtol, atol)
            outs = _compare_side(da, db, ra["outputs"], rb["outputs"], rtol, atol)
            result.rows.append(
                RecordDiff(
                    ra["module"],
                    ra.get("class", ""),
                    ra["kind"],
                    ra["call"],
                    ra["step"],
                    "match",
                    ins.same,
                    outs.same,
                    outs.max_abs,
                    outs.max_rel,
                    outs.detail,
                    outs.first,
                    outs.mismatched,
                    outs.total,
                    outs.differing,
                    len(ra["outputs"]),
                    rb.get("step_b"),
                )
            )
    _find_root(result, da)
    if result.only_in_a or result.only_in_b:
        result.equal = False
    return result


def _aligned(
    a: str, b: str, da: Dump, db: Dump, align: tuple[int, int] | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Both dumps' records on the steps both hold, b's renumbered by `align`; and the steps
    left out (the leading steps of the dump that starts earlier: a resumed run starts later)."""
    offset = 0 if align is None else align[0] - align[1]
    records_a = da.records
    records_b = (
        db.records
        if not offset
        else [{**r, "step": r["step"] + offset, "step_b": r["step"]} for r in db.records]
    )
    span_a, span_b = _steps(records_a), _steps(records_b)
    if span_a is None or span_b is None:
        return records_a, records_b, []
    if span_a[0] > span_b[1] or span_b[0] > span_a[1]:
        raise UsageError(
            f"'{a}' ({_span(*span_a)}) and '{b}' ({_span(*span_b)}) share no step"
            + (f" after aligning step {align[0]} of a with step {align[1]} of b" if align else "")
            + ". Pass --align-steps A:B (step A of a is step B of b), or record the resumed run "
            "with first_step=N."
        )
    start = max(span_a[0], span_b[0])
    left_out = [
        f"{side}: {_span(span[0], start - 1)}"
        for side, span in (("a", span_a), ("b", span_b))
        if span[0] < start
    ]
    if not left_out:
        return records_a, records_b, []
    return (
        [r for r in records_a if r["step"] >= start],
        [r for r in records_b if r["step"] >= start],
        left_out,
    )


def _find_root(result: DumpDiff, dump: Dump) -> None:
    """Set each row's status and the result's root, walking each step's records in the order
    the module docstring gives (inputs, parameters, then completion order)."""
    order = sorted(
        range(len(result.rows)),
        key=lambda i: (result.rows[i].step, _FIRST.get(result.rows[i].kind, 2), i),
    )
    for i in order:
        row = result.rows[i]
        if row.outputs_match and row.inputs_match:
            continue
        result.equal = False
        root = result.root
        if row.kind == LOSS and not result.loss:
            result.loss = f"the loss first differs at step {row.step}: {row.detail}"
        if root is None and (row.kind in _FIRST or (row.inputs_match and row.kind != LOSS)):
            row.status, result.root = "root", row
        elif (
            not row.inputs_match
            or row.kind == LOSS
            or (root is not None and root.kind in _FIRST)  # the data or the weights: all after
            or (root is not None and root.kind != GRAD and row.kind == GRAD)
        ):
            row.status = "downstream"  # a backward also reads the activations its forward saved
        elif root is not None and _contains(row.module, root.module, dump):
            row.status = "contains-root"
        else:
            row.status = "differs"


def _contains(outer: str, inner: str, dump: Dump) -> bool:
    """Whether module `outer` encloses `inner` (the root model's name is its class name)."""
    return inner.startswith(outer + ".") or outer == dump.manifest["model"].get("class")
