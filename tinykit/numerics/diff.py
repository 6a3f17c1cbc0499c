"""`tinykit.diff_dumps(a, b)`: align two recordings and name the first divergence.

Records are aligned by (module, kind, step) in the order they completed, with difflib's
matcher, so an extra or a missing call in one run is reported and the rest still pairs up.
Each pair is compared tensor by tensor with the one comparer (`compare.compare_tensors`: full
tensors within rtol/atol, assert_close's per-dtype defaults) or, for stats-only dumps, by hash.
The root cause is the first record whose output differs while its inputs matched (a leaf
completes before the container that called it, so the innermost module is named); records
whose inputs already differed are downstream of it, and the containers around it are marked.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from tinykit.errors import UsageError
from tinykit.numerics.compare import compare_tensors, tolerances
from tinykit.numerics.dumps import Dump, read_dump
from tinykit.numerics.summary import GRAD

__all__ = ["DumpDiff", "RecordDiff", "diff_dumps"]


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

    def label(self) -> str:
        return f"'{self.module}' ({self.cls}, {self.kind} call {self.call}, step {self.step})"


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
            lines.append(
                f"first divergence: {self.root.label()}: its output differs while its inputs "
                f"matched. {self.root.detail}"
            )
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
        if self.downstream:
            lines.append(
                f"downstream (inputs already differed): {len(self.downstream)} records, first "
                f"{self.downstream[0].label()}"
            )
        for side, extra in (("a", self.only_in_a), ("b", self.only_in_b)):
            if extra:
                more = f" and {len(extra) - 5} more" if len(extra) > 5 else ""
                lines.append(f"only in {side}: {', '.join(extra[:5])}{more}")
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
) -> tuple[bool, float | None, float | None, str]:
    """(all match, max abs, max rel, mismatch lines of the worst tensor)."""
    if len(xs) != len(ys):
        return False, None, None, f"{len(xs)} tensors against {len(ys)}"
    same, max_abs, max_rel, detail, worst = True, None, None, "", -1.0
    for x, y in zip(xs, ys, strict=True):
        if x["shape"] != y["shape"] or x["dtype"] != y["dtype"]:
            same = False
            detail = detail or (
                f"{x['name']}: {x['dtype']}{x['shape']} against {y['dtype']}{y['shape']}"
            )
            continue
        ta, tb = da.tensor(x), db.tensor(y)
        if ta is None or tb is None:  # stats only: bitwise by hash
            if x["hash"] != y["hash"]:
                same = False
                detail = detail or (
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
        max_abs = max(max_abs or 0.0, diff.max_abs)
        max_rel = max(max_rel or 0.0, diff.max_rel)
        if not diff.equal:
            same = False
            if diff.max_abs > worst:
                worst = diff.max_abs
                detail = f"{x['name']}: {diff.describe()}"
    return same, max_abs, max_rel, detail


def diff_dumps(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    rtol: float | None = None,
    atol: float | None = None,
) -> DumpDiff:
    """Compare two dumps written by `tinykit.record(..., out=DIR)`; `a` is the reference.

    Raises:
        UsageError: a folder is not a dump, is truncated, or the dumps are of different models.
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
    matcher = difflib.SequenceMatcher(
        None, [_tag(r) for r in da.records], [_tag(r) for r in db.records], autojunk=False
    )
    result = DumpDiff(str(a), str(b), rtol, atol, equal=True, root=None)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op != "equal":
            result.only_in_a += [_where(r) for r in da.records[i1:i2]]
            result.only_in_b += [_where(r) for r in db.records[j1:j2]]
            continue
        for ra, rb in zip(da.records[i1:i2], db.records[j1:j2], strict=True):
            in_same, *_ = _compare_side(da, db, ra["inputs"], rb["inputs"], rtol, atol)
            out_same, mx, rel, detail = _compare_side(
                da, db, ra["outputs"], rb["outputs"], rtol, atol
            )
            row = RecordDiff(
                ra["module"],
                ra.get("class", ""),
                ra["kind"],
                ra["call"],
                ra["step"],
                "match",
                in_same,
                out_same,
                mx,
                rel,
                detail,
            )
            result.rows.append(row)
    for row in result.rows:
        if row.outputs_match and row.inputs_match:
            continue
        result.equal = False
        if result.root is None and row.inputs_match and not row.outputs_match:
            row.status, result.root = "root", row
        elif not row.inputs_match or (
            result.root is not None and result.root.kind != GRAD and row.kind == GRAD
        ):
            row.status = "downstream"  # a backward also reads the activations its forward saved
        elif result.root is not None and _contains(row.module, result.root.module, da):
            row.status = "contains-root"
        else:
            row.status = "differs"
    if result.only_in_a or result.only_in_b:
        result.equal = False
    return result


def _contains(outer: str, inner: str, dump: Dump) -> bool:
    """Whether module `outer` encloses `inner` (the root model's name is its class name)."""
    return inner.startswith(outer + ".") or outer == dump.manifest["model"].get("class")
