"""tensor_snapshot: golden safetensors files, dtype-aware tolerances, precise failure messages."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tinykit.errors import SnapshotMismatch
from tinykit.numerics.compare import compare_dicts
from tinykit.pytest_plugin.snapshot import TensorSnapshot, env_key


def compare(actual, expected):
    return compare_dicts(actual, expected, expected_name="the snapshot")


LOGITS_TEST = """
import torch
def test_logits(tensor_snapshot):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    logits = model(torch.ones(2, 4)) + float(__import__("os").environ.get("SHIFT", "0"))
    tensor_snapshot("logits", logits)
    tensor_snapshot("grads", {"w": torch.ones(3, 4), "b": torch.zeros(3)})
"""


def test_snapshot_lifecycle_missing_then_written_then_compared(pytester, monkeypatch):
    pytester.makepyfile(test_model=LOGITS_TEST)
    missing = pytester.runpytest_subprocess()
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(
        [
            "*SnapshotMismatch: No snapshot 'logits' for this environment: *logits@torch-*_cpu_float32"
            ".safetensors does not exist. Snapshots recorded for other environments: none. Record it "
            "with: pytest 'test_model.py::test_logits' --tinykit-update-snapshots",
        ]
    )
    written = pytester.runpytest_subprocess("--tinykit-update-snapshots")
    written.assert_outcomes(passed=1)
    written.stdout.fnmatch_lines(["tinykit: wrote 2 tensor snapshot(s)"])
    folder = pytester.path / "__snapshots__" / "test_model" / "test_logits"
    assert sorted(p.name.split("@")[0] for p in folder.iterdir()) == ["grads", "logits"]
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    monkeypatch.setenv("SHIFT", "0.5")
    shifted = pytester.runpytest_subprocess()
    shifted.assert_outcomes(failed=1)
    shifted.stdout.fnmatch_lines(
        [
            "*SnapshotMismatch: Tensor snapshot 'logits' differs from *: 'logits': Mismatched "
            "elements: 6 / 6 (100.0%) with rtol=1.3e-06, atol=1e-05 for float32. First mismatch at "
            "index (0, 0): actual * vs expected *. Greatest absolute difference: 0.5 at index (*). "
            "Greatest relative difference: * at index (*). If the change is intended, "
            "rewrite it with: pytest 'test_model.py::test_logits' --tinykit-update-snapshots",
        ]
    )


def snap(tmp_path, update=False) -> TensorSnapshot:
    return TensorSnapshot(tmp_path, "t.py::test", update=update)


def test_first_difference_and_max_errors_are_located(tmp_path):
    expected = torch.zeros(2, 3, 4)
    snap(tmp_path, update=True)("x", expected)
    actual = expected.clone()
    actual[0, 2, 1] = 1e-3
    actual[1, 0, 3] = -2.0
    with pytest.raises(SnapshotMismatch) as e:
        snap(tmp_path)("x", actual)
    message = str(e.value)
    assert "Mismatched elements: 2 / 24 (8.3%)" in message
    assert "First mismatch at index (0, 2, 1): actual 0.0010000000" in message
    assert "Greatest absolute difference: 2 at index (1, 0, 3)" in message
    assert e.value.path.name == f"x@{env_key({'x': actual})}.safetensors"


@pytest.mark.parametrize(("dtype", "passes"), [(torch.bfloat16, True), (torch.float32, False)])
def test_tolerance_depends_on_dtype(tmp_path, dtype, passes):
    expected = torch.full((8,), 1.0, dtype=dtype)
    snap(tmp_path, update=True)("x", expected)
    actual = expected + torch.tensor(1e-3, dtype=dtype)  # within bf16's rtol, not float32's
    if passes:
        snap(tmp_path)("x", actual)
    else:
        with pytest.raises(SnapshotMismatch, match="Mismatched elements: 8 / 8"):
            snap(tmp_path)("x", actual)


def test_integers_are_exact_and_shape_changes_are_reported():
    assert compare({"t": torch.tensor([1, 2])}, {"t": torch.tensor([1, 3])}) == [
        "'t': Mismatched elements: 1 / 2 (50.0%) with rtol=0, atol=0 for int64. First mismatch "
        "at index (1,): actual 2 vs expected 3. Greatest absolute difference: 1 at index (1,). "
        "Greatest relative difference: 0.333 at index (1,)"
    ]
    assert compare({"t": torch.zeros(2, 3)}, {"t": torch.zeros(3, 2)}) == [
        "'t': shape/dtype (2, 3) torch.float32 but the snapshot has (3, 2) torch.float32"
    ]
    assert compare({"a": torch.zeros(1)}, {"b": torch.zeros(1)}) == [
        "missing tensors ['b'] (present in the snapshot)",
        "unexpected tensors ['a'] (absent from the snapshot)",
    ]


def test_nans_must_sit_at_the_same_places():
    nan = float("nan")
    assert compare({"t": torch.tensor([nan, 1.0])}, {"t": torch.tensor([nan, 1.0])}) == []
    [problem] = compare({"t": torch.tensor([1.0, nan])}, {"t": torch.tensor([1.0, 1.0])})
    assert "First mismatch at index (1,)" in problem


finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(finite, min_size=1, max_size=16),
    st.lists(finite, min_size=1, max_size=16),
    st.sampled_from(["float16", "bfloat16", "float32", "float64"]),
)
@example(xs=[0.0, 0.0], ys=[0.0, 1e-05], dtype_name="float16")  # tolerance rounds in float16
def test_agrees_with_torch_testing_assert_close(xs, ys, dtype_name):
    """torch.testing.assert_close is the reference for which tensors count as equal."""
    dtype = getattr(torch, dtype_name)
    n = min(len(xs), len(ys))
    a, e = torch.tensor(xs[:n]).to(dtype), torch.tensor(ys[:n]).to(dtype)
    e = torch.where(torch.arange(n) % 2 == 0, a, e)  # mix equal and different elements
    try:
        torch.testing.assert_close(a, e)
        reference_ok = True
    except AssertionError:
        reference_ok = False
    assert (compare({"t": a}, {"t": e}) == []) == reference_ok
