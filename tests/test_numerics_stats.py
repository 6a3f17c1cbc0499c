"""The stats kernels (`tinykit.numerics.stats.summarize`) against a float64 reference.

The fast path reads a finite tensor in four reductions and takes the zero count and the smallest
non-zero |x| only when abs-min is 0, and a one-pass variance unless the mean dominates; each
branch must give what the plain float64 formulas give, on any values."""

from __future__ import annotations

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tinykit.numerics.stats import summarize

SPECIALS = [0.0, -0.0, 1e-40, -1e-38, 3.0, float("nan"), float("inf"), float("-inf")]


def _reference(x: torch.Tensor) -> dict:
    d = x.double()
    finite = d[d.isfinite()]
    nonzero = finite.abs()[finite != 0]
    return {
        "nan": int(d.isnan().sum()),
        "posinf": int((d == math.inf).sum()),
        "neginf": int((d == -math.inf).sum()),
        "mean": finite.mean().item() if finite.numel() else None,
        "std": (finite.std().item() if finite.numel() > 1 else 0.0) if finite.numel() else None,
        "min": finite.min().item() if finite.numel() else None,
        "nonzero_absmin": nonzero.min().item() if nonzero.numel() else None,
        "zeros": int((finite == 0).sum()),
    }


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.floats(-1e6, 1e6, width=32), st.sampled_from(SPECIALS)),
        min_size=1,
        max_size=40,
    ),
    offset=st.sampled_from([0.0, 1e4]),  # a mean that dominates takes the two-pass variance
    dtype=st.sampled_from([torch.float32, torch.float64, torch.float16]),
)
def test_stats_match_a_float64_reference(values, offset, dtype):
    x = (torch.tensor(values, dtype=torch.float64) + offset).to(dtype)
    got = summarize(x, False, "x", full_stats=True, with_hash=False)
    want = _reference(x)
    assert (got.nan, got.posinf, got.neginf) == (want["nan"], want["posinf"], want["neginf"])
    if want["mean"] is None:  # nothing finite
        assert got.mean is None
        return
    scale = max(1.0, float(x.double()[x.double().isfinite()].abs().max()))
    assert math.isclose(got.mean, want["mean"], rel_tol=1e-5, abs_tol=1e-6 * scale)
    assert math.isclose(got.std, want["std"], rel_tol=1e-3, abs_tol=1e-5 * scale)
    assert got.min == want["min"]
    assert got.zeros == want["zeros"]
    assert got.absmin == (0.0 if want["zeros"] else want["nonzero_absmin"])
    assert got.nonzero_absmin == want["nonzero_absmin"]
