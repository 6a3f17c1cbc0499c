"""Markers and device helpers for users' tests: ``requires_gpus(n)``, ``requires_bf16``, ``slow``.

The decorators only attach ``tinykit_*`` markers; the tinykit pytest plugin decides whether to
skip when the test is set up, never at collection, so collecting a suite neither imports torch
nor initialises CUDA (a process that initialised CUDA can no longer fork workers safely).

    from tinykit.testing import requires_gpus, requires_bf16, slow

    @requires_gpus(2)
    def test_ddp_step(tinykit_device): ...

Device choice, in order: ``TINYKIT_DEVICE`` (e.g. ``cpu``, ``cuda:1``), then the first available
accelerator (CUDA, XPU, NPU, MLU, MUSA, HPU, MPS), then CPU.
``CUDA_VISIBLE_DEVICES=""`` hides every CUDA device, as usual.
"""

from __future__ import annotations

import os

import pytest

# The device helpers live in tinykit._devices (no pytest there, so rank workers and memory
# budgets can use them); they are re-exported here for tests.
from tinykit._devices import (
    accelerators,
    bf16_supported,
    device_memory,
    gpu_count,
    select_device,
)
from tinykit.errors import UsageError

__all__ = [
    "accelerators",
    "bf16_supported",
    "device_memory",
    "gpu_count",
    "requires_bf16",
    "requires_gpus",
    "run_slow",
    "select_device",
    "slow",
]


def requires_gpus(n: int = 1) -> pytest.MarkDecorator:
    """Skip the test unless ``n`` accelerator devices are visible."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise UsageError(
            f"requires_gpus({n!r}): n must be an int >= 1. Write e.g. @requires_gpus(2)."
        )
    return pytest.mark.tinykit_gpu(n)


#: Skip the test unless the selected device computes in bfloat16 (CPUs do; CUDA needs sm_80+).
requires_bf16 = pytest.mark.tinykit_bf16

#: Run the test only when ``TINYKIT_RUN_SLOW=1``.
slow = pytest.mark.tinykit_slow


def run_slow() -> bool:
    return os.environ.get("TINYKIT_RUN_SLOW", "").lower() in {"1", "true", "yes"}
