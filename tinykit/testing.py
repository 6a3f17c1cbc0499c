"""Markers and device helpers for users' tests: ``requires_gpus(n)``, ``requires_bf16``, ``slow``.

The decorators only attach ``tinykit_*`` markers; the tinykit pytest plugin decides whether to
skip when the test is set up, never at collection, so collecting a suite neither imports torch
nor initialises CUDA (a process that initialised CUDA can no longer fork workers safely).

    from tinykit.testing import requires_gpus, requires_bf16, slow

    @requires_gpus(2)
    def test_ddp_step(tinykit_device): ...

Device choice, in order: ``TINYKIT_DEVICE`` (e.g. ``cpu``, ``cuda:1``), then CUDA, XPU, MPS, CPU.
``CUDA_VISIBLE_DEVICES=""`` hides every CUDA device, as usual.
"""

from __future__ import annotations

import os

import pytest

from tinykit.errors import UsageError


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


def gpu_count() -> int:
    """Visible CUDA (or XPU) devices, counted without initialising CUDA."""
    import torch

    # device_count() asks the driver (NVML where available) and leaves CUDA uninitialised.
    count = torch.cuda.device_count()
    if not count and hasattr(torch, "xpu"):
        count = torch.xpu.device_count()
    return count


def select_device() -> str:
    """The device tests should use: TINYKIT_DEVICE, else cuda, xpu, mps, cpu (first available)."""
    if chosen := os.environ.get("TINYKIT_DEVICE"):
        return chosen
    import torch

    if torch.cuda.is_available():  # no CUDA initialisation either
        return "cuda"
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    if torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def bf16_supported(device: str | None = None) -> bool:
    """Whether ``device`` (default: ``select_device()``) computes in bfloat16.

    Called at test setup only: on CUDA it reads the compute capability, which initialises CUDA.
    """
    device = device or select_device()
    kind = device.split(":")[0]
    if kind == "cpu":
        return True  # torch implements bf16 kernels on every CPU, natively or emulated
    import torch

    if kind == "cuda":
        index = int(device.split(":")[1]) if ":" in device else 0
        return torch.cuda.is_available() and torch.cuda.get_device_capability(index)[0] >= 8
    if kind == "xpu":
        return torch.xpu.is_available()
    return kind == "mps" and torch.backends.mps.is_available()
