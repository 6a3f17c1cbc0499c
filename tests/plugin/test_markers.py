"""requires_gpus / requires_bf16 / slow markers and device selection; no torch at collection."""

from __future__ import annotations

import pytest

from tinykit import testing
from tinykit.errors import UsageError

MARKED = """
from tinykit.testing import requires_gpus, requires_bf16, slow

@requires_gpus(1)
def test_one_gpu(): pass

@requires_gpus(64)
def test_many_gpus(): pass

@requires_bf16
def test_bf16(tinykit_device):
    import torch
    x = torch.ones(4, dtype=torch.bfloat16, device=tinykit_device)
    assert (x @ x).item() == 4

@slow
def test_slow(): pass
"""
# Runs after collection in the inner session: collecting marked tests must not import torch.
REPORT_TORCH_AT_COLLECTION = """
import sys
def pytest_collection_finish(session):
    print("torch imported at collection:", "torch" in sys.modules)
"""


def test_markers_skip_without_hardware_and_collection_imports_no_torch(pytester, monkeypatch):
    monkeypatch.delenv("TINYKIT_RUN_SLOW", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the same outcome on a GPU machine
    pytester.makepyfile(MARKED)
    pytester.makeconftest(REPORT_TORCH_AT_COLLECTION)
    result = pytester.runpytest_subprocess("-rs", "-s", "--strict-markers")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines_random(
        [
            "torch imported at collection: False",
            "SKIPPED * needs 1 GPU(s), found 0",
            "SKIPPED * needs 64 GPU(s), found 0",
            "SKIPPED * slow test: set TINYKIT_RUN_SLOW=1 to run it",
        ]
    )


def test_slow_tests_run_with_tinykit_run_slow(pytester, monkeypatch):
    monkeypatch.setenv("TINYKIT_RUN_SLOW", "1")
    pytester.makepyfile("from tinykit.testing import slow\n@slow\ndef test_slow(): pass\n")
    pytester.runpytest_subprocess("--strict-markers").assert_outcomes(passed=1)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_requires_gpus_rejects_a_bad_count(bad):
    with pytest.raises(UsageError, match=r"n must be an int >= 1"):
        testing.requires_gpus(bad)


def test_device_selection_honours_the_override_and_hidden_gpus(monkeypatch):
    import torch

    monkeypatch.setenv("TINYKIT_DEVICE", "cpu")
    assert testing.select_device() == "cpu"
    monkeypatch.delenv("TINYKIT_DEVICE")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert testing.select_device() == expected
    assert not torch.cuda.is_initialized()  # selecting a device does not initialise CUDA
    assert testing.gpu_count() == torch.cuda.device_count()
    assert testing.bf16_supported("cpu")
