"""tinykit.numerics.compare: one comparer, checked against torch.testing.assert_close itself."""

from __future__ import annotations

import re

import pytest
import torch

from tinykit.errors import UsageError
from tinykit.numerics.compare import compare_summaries, compare_tensors, tolerances
from tinykit.numerics.record import summarize


def _assert_close_message(actual, expected) -> str:
    with pytest.raises(AssertionError) as e:
        torch.testing.assert_close(actual, expected)
    return str(e.value)


def test_counts_and_locates_like_assert_close():
    expected = torch.zeros(2, 5)
    actual = expected.clone()
    actual[0, 3], actual[1, 1] = 0.5, -2.0
    diff = compare_tensors(actual, expected)
    reference = _assert_close_message(actual, expected)
    assert diff.mismatch_line() == "Mismatched elements: 2 / 10 (20.0%)"
    assert diff.mismatch_line() in reference
    assert f"Greatest absolute difference: 2.0 at index {diff.max_abs_at}" in reference
    assert (diff.first_at, diff.max_abs_at, diff.max_abs) == ((0, 3), (1, 1), 2.0)
    assert (diff.rtol, diff.atol) == tolerances(torch.float32) == (1.3e-6, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_default_tolerances_are_assert_close_s(dtype):
    expected = torch.linspace(-3, 3, 64, dtype=torch.float64).to(dtype)
    for scale in (1e-7, 1e-5, 1e-3, 1e-2, 1e-1):
        actual = (expected.double() * (1 + scale) + scale).to(dtype)
        try:
            torch.testing.assert_close(actual, expected)
            reference = None
        except AssertionError as e:
            reference = int(re.search(r"Mismatched elements: (\d+) /", str(e)).group(1))
        diff = compare_tensors(actual, expected)
        assert diff.equal == (reference is None)
        assert diff.mismatched == (reference or 0)


def test_integers_are_exact_nans_match_and_shapes_must_agree():
    assert compare_tensors(torch.tensor([1, 2]), torch.tensor([1, 3])).mismatched == 1
    nan = float("nan")
    assert compare_tensors(torch.tensor([nan, 1.0]), torch.tensor([nan, 1.0])).equal
    assert compare_tensors(torch.tensor([True]), torch.tensor([False])).max_abs == 1.0
    with pytest.raises(UsageError, match="one shape and dtype"):
        compare_tensors(torch.zeros(2, 3), torch.zeros(3, 2))


def test_summaries_compare_bitwise_unless_a_tolerance_is_given():
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    b = a.clone()
    b[2, 1] += 1e-4
    sa, sb = summarize(a, keep_values=True), summarize(b, keep_values=True)
    assert compare_summaries(sa, summarize(a.clone(), keep_values=False)) == (True, None)
    same, diff = compare_summaries(sa, sb)
    assert not same and diff.max_abs_at == (2, 1) and diff.mismatched == 1
    assert compare_summaries(sa, sb, atol=1e-3)[0]
    assert compare_summaries(sa, summarize(torch.zeros(4), keep_values=True)) == (False, None)
