"""The one list of accelerators tinykit knows, and what it asks of them.

Nothing here initialises CUDA: a process that created a CUDA context can no longer fork workers
safely, and cuBLAS reads CUBLAS_WORKSPACE_CONFIG only when the context is created (field-guide
§5). `torch.cuda.device_count()` and `is_available()` ask the driver through NVML and leave CUDA
uninitialised; device properties are read from torch only when CUDA already exists, else through
NVML (`nvidia-ml-py`, when installed) or `nvidia-smi`. torch itself is imported only when a
helper needs it, and `seed_backends` never imports it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

__all__ = [
    "ACCELERATORS",
    "accelerators",
    "bf16_supported",
    "device_memory",
    "gpu_count",
    "in_use",
    "memory_stats",
    "reset_peak_memory",
    "physical_gpus",
    "seed_backends",
    "select_device",
    "tiny_threads",
]

# torch device types beside "cpu", in the order select_device() prefers them. The out-of-tree
# ones (npu: Ascend, mlu: Cambricon, musa: Moore Threads, hpu: Gaudi) appear as torch.<name>
# once their plugin package is imported.
ACCELERATORS = ("cuda", "xpu", "npu", "mlu", "musa", "hpu", "mps")


@contextlib.contextmanager
def tiny_threads() -> Iterator[None]:
    """One intra-op CPU thread while tiny models are built and run: their tensors are too small
    to split, and threads that wait on each other stall whenever another process holds a core
    (a make_tiny on 2 busy cores took 2-3x as long with two). The caller's count comes back."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _backend(torch: Any, name: str) -> Any:
    return torch.backends.mps if name == "mps" else getattr(torch, name, None)


def _available(torch: Any, name: str) -> bool:
    backend = _backend(torch, name)
    try:
        return backend is not None and bool(backend.is_available())
    except Exception:  # a half-installed plugin must not break device discovery
        return False


def accelerators() -> list[str]:
    """Device types of ACCELERATORS that are available here, in preference order."""
    import torch

    return [name for name in ACCELERATORS if _available(torch, name)]


def seed_backends(torch: Any) -> list[Any]:
    """Available accelerator modules that keep their own generators (`manual_seed_all`)."""
    found = []
    for name in ACCELERATORS:
        backend = getattr(torch, name, None)
        if hasattr(backend, "manual_seed_all") and _available(torch, name):
            found.append(backend)
    return found


def gpu_count(device_type: str | None = None) -> int:
    """Visible CUDA devices (else XPU, NPU, ... devices), counted without initialising CUDA.

    ``device_type`` counts one type only, e.g. ``gpu_count("cuda")`` for NCCL.
    """
    import torch

    for name in ACCELERATORS if device_type is None else (device_type,):
        backend = _backend(torch, name)
        if name != "mps" and backend is not None and hasattr(backend, "device_count"):
            with contextlib.suppress(Exception):
                if count := int(backend.device_count()):
                    return count
    return 0


def select_device() -> str:
    """TINYKIT_DEVICE (e.g. ``cpu``, ``cuda:1``), else the first available accelerator, else cpu."""
    if chosen := os.environ.get("TINYKIT_DEVICE"):
        return chosen
    found = accelerators()
    return found[0] if found else "cpu"


def _split(device: str) -> tuple[str, int]:
    device_type, _, index = device.partition(":")
    return device_type, int(index) if index else 0


def bf16_supported(device: str | None = None) -> bool:
    """Whether ``device`` (default: ``select_device()``) computes in bfloat16.

    Call it at test setup, not at import: on CUDA, when NVML cannot tell the compute capability,
    it is read from torch, which initialises CUDA.
    """
    device_type, index = _split(device or select_device())
    if device_type == "cpu":
        return True  # torch implements bf16 kernels on every CPU, natively or emulated
    import torch

    if device_type == "cuda":
        if not torch.cuda.is_available():
            return False
        if getattr(torch.version, "hip", None):
            return True  # every ROCm GPU torch supports computes in bf16
        gpu = _visible_gpu(index)
        if gpu is not None and "capability" in gpu and not torch.cuda.is_initialized():
            return int(gpu["capability"].split(".")[0]) >= 8
        return torch.cuda.get_device_capability(index)[0] >= 8
    return _available(torch, device_type)


def device_memory(device: str | None = None) -> int | None:
    """Total memory of ``device`` in bytes; None on CPU, or when it cannot be read safely."""
    device_type, index = _split(device or select_device())
    if (
        device_type == "cpu"
        or "torch" not in sys.modules
        and importlib.util.find_spec("torch") is None
    ):
        return None
    import torch

    if device_type == "cuda":
        if torch.cuda.is_initialized():
            return int(torch.cuda.get_device_properties(index).total_memory)
        gpu = _visible_gpu(index)
        return gpu["memory_mib"] * 2**20 if gpu else None
    backend = _backend(torch, device_type)
    if (
        device_type != "mps"
        and _available(torch, device_type)
        and hasattr(backend, "get_device_properties")
    ):
        with contextlib.suppress(Exception):
            return int(backend.get_device_properties(index).total_memory)
    return None


def _visible_gpu(index: int) -> dict[str, Any] | None:
    """The physical GPU behind CUDA index ``index``, honouring CUDA_VISIBLE_DEVICES.

    NVML and nvidia-smi number every GPU in the machine; CUDA numbers only the visible ones.
    A CUDA_VISIBLE_DEVICES of UUIDs cannot be mapped here and gives None.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    physical = index
    if visible is not None:
        entries = [v.strip() for v in visible.split(",") if v.strip()]
        if index >= len(entries) or not entries[index].isdigit():
            return None
        physical = int(entries[index])
    gpus = physical_gpus()
    return gpus[physical] if physical < len(gpus) else None


def physical_gpus() -> list[dict[str, Any]]:
    """Every NVIDIA GPU in the machine: name, capability, memory_mib, driver (no CUDA init).

    When this process already initialised CUDA, torch's properties are used instead (they
    cover the visible devices only, but also ROCm).
    """
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return [
            {
                "name": p.name,
                "capability": f"{p.major}.{p.minor}",
                "memory_mib": p.total_memory // 2**20,
            }
            for p in map(torch.cuda.get_device_properties, range(torch.cuda.device_count()))
        ]
    if importlib.util.find_spec("pynvml") is not None:  # nvidia-ml-py: no subprocess, no parsing
        with contextlib.suppress(Exception):
            return _nvml_gpus()
    return _nvidia_smi_gpus()


def _nvml_gpus() -> list[dict[str, Any]]:
    import pynvml  # type: ignore[import-not-found]  # optional: the nvml extra

    pynvml.nvmlInit()
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(
                {
                    "name": _text(pynvml.nvmlDeviceGetName(handle)),
                    "capability": f"{major}.{minor}",
                    "memory_mib": pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20,
                    "driver": _text(driver),
                }
            )
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value  # older pynvml returns bytes


def _nvidia_smi_gpus() -> list[dict[str, Any]]:
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,compute_cap,memory.total,driver_version",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    gpus = []
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 4:
            gpus.append(
                {
                    "name": fields[0],
                    "capability": fields[1],
                    "memory_mib": int(float(fields[2])),
                    "driver": fields[3],
                }
            )
    return gpus


# -- memory counters of devices the code already uses -----------------------------------------


def _initialised(torch: Any, name: str) -> bool:
    """Whether this process already created a context on device type `name` (asks, never creates)."""
    if name == "mps":  # no context to create: Metal is ready once torch sees the device
        return _available(torch, "mps")
    backend = getattr(torch, name, None)
    probe = getattr(backend, "is_initialized", None)
    try:
        return bool(probe()) if callable(probe) else False
    except Exception:  # a half-installed plugin must not break memory tracking
        return False


def in_use() -> list[str]:
    """Devices (``cuda:0``, ``xpu:1``, ``mps``) whose memory can be read without initialising
    anything: only device types this process already initialised. Empty without torch loaded."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []  # code that never imported torch has touched no accelerator
    found = []
    for name in ACCELERATORS:
        if not _initialised(torch, name):
            continue
        if name == "mps":
            found.append("mps")
            continue
        with contextlib.suppress(Exception):
            found += [f"{name}:{i}" for i in range(int(_backend(torch, name).device_count()))]
    return found


def memory_stats(device: str) -> dict[str, int]:
    """allocated, reserved, peak_allocated and peak_reserved bytes of an initialised device.

    CUDA, XPU and the out-of-tree backends through their torch.<name> module (the same four
    calls), else `torch.accelerator`; MPS has no peak counters (its peaks are the current values).
    """
    import torch

    device_type, index = _split(device)
    if device_type == "mps":
        allocated = int(torch.mps.current_allocated_memory())
        reserved = int(torch.mps.driver_allocated_memory())
        return {
            "allocated": allocated,
            "reserved": reserved,
            "peak_allocated": allocated,
            "peak_reserved": reserved,
        }
    backend = _backend(torch, device_type)
    if not hasattr(backend, "max_memory_allocated"):
        backend = torch.accelerator  # the generic API (torch >= 2.9) speaks for any backend
    return {
        "allocated": int(backend.memory_allocated(index)),
        "reserved": int(backend.memory_reserved(index)),
        "peak_allocated": int(backend.max_memory_allocated(index)),
        "peak_reserved": int(backend.max_memory_reserved(index)),
    }


def reset_peak_memory(device: str) -> None:
    """Start the peak counters of an initialised device afresh (a no-op on MPS)."""
    import torch

    device_type, index = _split(device)
    if device_type == "mps":
        return
    backend = _backend(torch, device_type)
    if not hasattr(backend, "reset_peak_memory_stats"):
        backend = torch.accelerator
    backend.reset_peak_memory_stats(index)
