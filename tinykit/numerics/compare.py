"""Compare tensors, or the summaries a `Recorder` keeps of them, and say precisely how they differ.

One comparer for every tinykit feature that asks "are these numbers the same?": the
`tensor_snapshot` fixture (goldens), `check_determinism` (two runs) and dump diffs. An element
matches when ``torch.isclose(actual, expected, rtol, atol, equal_nan=True)`` holds in the tensors'
own dtype, as in ``torch.testing.assert_close``, whose per-dtype default tolerances are used;
integers and bools are exact. Messages follow assert_close's wording::

    Mismatched elements: 2 / 10 (20.0%)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from tinykit.numerics.summary import TensorSummary

__all__ = [
    "TOLERANCES",
    "TensorDiff",
    "compare_dicts",
    "compare_summaries",
    "compare_tensors",
    "tolerances",
]

# (rtol, atol) per dtype: torch.testing.assert_close's defaults; integers and bools are exact.
TOLERANCES = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex32": (1e-3, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
}


def tolerances(dtype: torch.dtype | str) -> tuple[float, float]:
    """The default (rtol, atol) for `dtype`; (0, 0) for exact types."""
    return TOLERANCES.get(str(dtype).removeprefix("torch."), (0.0, 0.0))


@dataclass(frozen=True)
class TensorDiff:
    """How two tensors of one shape differ. Indices are multi-dimensional, None when equal."""

    equal: bool
    shape: tuple[int, ...]
    dtype: str
    rtol: float
    atol: float
    mismatched: int
    total: int
    first_at: tuple[int, ...] | None = None
    first_actual: float | complex | None = None
    first_expected: float | complex | None = None
    max_abs: float = 0.0
    max_abs_at: tuple[int, ...] | None = None
    max_rel: float = 0.0
    max_rel_at: tuple[int, ...] | None = None

    @property
    def percent(self) -> float:
        return 100.0 * self.mismatched / self.total if self.total else 0.0

    def mismatch_line(self) -> str:
        return f"Mismatched elements: {self.mismatched} / {self.total} ({self.percent:.1f}%)"

    def describe(self) -> str:
        """One line: how many elements differ, the first, and the greatest differences."""
        if self.equal:
            return f"all {self.total} elements match (rtol={self.rtol:g}, atol={self.atol:g})"
        return (
            f"{self.mismatch_line()} with rtol={self.rtol:g}, atol={self.atol:g} for "
            f"{self.dtype}. First mismatch at index {self.first_at}: actual "
            f"{self.first_actual:.9g} vs expected {self.first_expected:.9g}. Greatest absolute "
            f"difference: {self.max_abs:.3g} at index {self.max_abs_at}. Greatest relative "
            f"difference: {self.max_rel:.3g} at index {self.max_rel_at}"
        )


def compare_tensors(
    actual: torch.Tensor,
    expected: torch.Tensor,
    rtol: float | None = None,
    atol: float | None = None,
) -> TensorDiff:
    """Elementwise comparison of two tensors of the same shape and dtype (on any device).

    ``rtol``/``atol`` default to the dtype's `TOLERANCES`. NaNs match NaNs at the same places.

    Raises:
        UsageError: shapes or dtypes differ (compare those first; there is no elementwise answer).
    """
    import torch

    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        from tinykit.errors import UsageError

        raise UsageError(
            f"compare_tensors needs one shape and dtype; got {tuple(actual.shape)} "
            f"{actual.dtype} and {tuple(expected.shape)} {expected.dtype}. Compare shapes first."
        )
    default_rtol, default_atol = tolerances(actual.dtype)
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    a, e = actual.detach().cpu(), expected.detach().cpu()
    if a.dtype == torch.bool:
        a, e = a.to(torch.uint8), e.to(torch.uint8)
    wide = torch.complex128 if a.is_complex() else torch.float64
    a64, e64 = a.to(wide), e.to(wide)
    abs_err = (a64 - e64).abs()
    if a.dtype.is_floating_point or a.is_complex():
        bad = ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)  # in the own dtype
    else:
        bad = abs_err > atol + rtol * e64.abs()
    shape, dtype = tuple(actual.shape), str(actual.dtype).removeprefix("torch.")
    mismatched = int(bad.sum())
    if not mismatched:
        return TensorDiff(True, shape, dtype, rtol, atol, 0, a.numel())
    both_nan = a64.isnan() & e64.isnan()
    same_inf = a64.isinf() & (a64 == e64)
    finite_err = torch.where(both_nan | same_inf, torch.zeros_like(abs_err), abs_err)
    finite_err = torch.nan_to_num(finite_err, nan=float("inf"))
    rel_err = torch.where(finite_err == 0, torch.zeros_like(finite_err), finite_err / e64.abs())

    def index(flat: torch.Tensor) -> tuple[int, ...]:
        return tuple(int(i) for i in torch.unravel_index(flat, shape))

    first = index(bad.flatten().nonzero()[0, 0])
    return TensorDiff(
        equal=False,
        shape=shape,
        dtype=dtype,
        rtol=rtol,
        atol=atol,
        mismatched=mismatched,
        total=a.numel(),
        first_at=first,
        first_actual=a64[first].item(),
        first_expected=e64[first].item(),
        max_abs=finite_err.max().item(),
        max_abs_at=index(finite_err.argmax()),
        max_rel=rel_err.max().item(),
        max_rel_at=index(rel_err.argmax()),
    )


def compare_summaries(
    actual: TensorSummary, expected: TensorSummary, atol: float = 0, rtol: float = 0
) -> tuple[bool, TensorDiff | None]:
    """Whether two recorded tensors match, and their elementwise diff when values were kept.

    Equal hashes mean bitwise equal. With atol = rtol = 0 nothing else matches (a bitwise check:
    -0.0 against 0.0 or another NaN payload is a difference); otherwise the kept values are
    compared as `compare_tensors` does. The diff is None when a summary kept no values or the
    shapes or dtypes differ.
    """
    if actual.hash == expected.hash:
        return True, None
    if (
        actual.values is None
        or expected.values is None
        or actual.shape != expected.shape
        or actual.dtype != expected.dtype
    ):
        return False, None
    diff = compare_tensors(
        actual.values.reshape(actual.shape),
        expected.values.reshape(expected.shape),
        rtol=rtol,
        atol=atol,
    )
    return (diff.equal and (atol > 0 or rtol > 0)), diff


def compare_dicts(
    actual: Mapping[str, torch.Tensor],
    expected: Mapping[str, torch.Tensor],
    rtol: float | None = None,
    atol: float | None = None,
    *,
    expected_name: str = "the expected set",
) -> list[str]:
    """Describe every difference between two tensor dicts; an empty list means they match.

    `expected_name` says in the messages where `expected` comes from (e.g. "the snapshot").
    """
    problems = []
    if missing := sorted(expected.keys() - actual.keys()):
        problems.append(f"missing tensors {missing} (present in {expected_name})")
    if extra := sorted(actual.keys() - expected.keys()):
        problems.append(f"unexpected tensors {extra} (absent from {expected_name})")
    for name in sorted(actual.keys() & expected.keys()):
        a, e = actual[name], expected[name]
        if a.shape != e.shape or a.dtype != e.dtype:
            problems.append(
                f"{name!r}: shape/dtype {tuple(a.shape)} {a.dtype} but {expected_name} has "
                f"{tuple(e.shape)} {e.dtype}"
            )
            continue
        diff = compare_tensors(a, e, rtol=rtol, atol=atol)
        if not diff.equal:
            problems.append(f"{name!r}: {diff.describe()}")
    return problems
