"""`check_leaks`: call a function again and again and fail when the memory it keeps grows.

    report = check_leaks(step, limit="1 MB", warmup=2, iterations=5)

The first `warmup` calls fill caches (allocator pools, lazily built tables, compiled kernels);
then the memory in use is read after every call, once garbage is collected and freed heap is
handed back to the OS: the RSS of the process, the Python allocations still alive (tracemalloc,
which also names the lines that grew) and the allocated memory of every accelerator in use. Memory
that grows over the measured calls by more than `limit` in total is a leak.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from tinykit import _devices
from tinykit.errors import MemoryLeakDetected, UsageError
from tinykit.memory.sizes import format_bytes, parse_size
from tinykit.memory.track import Allocation, settle, without_noise

__all__ = ["LeakReport", "MemoryLeakDetected", "check_leaks"]


@dataclass
class LeakReport:
    """Memory in use after each measured call, and what grew."""

    limit: int
    rss: list[int] = field(default_factory=list)
    python: list[int] = field(default_factory=list)
    device: dict[str, list[int]] = field(default_factory=dict)
    grown: list[Allocation] = field(default_factory=list)

    @staticmethod
    def _growth(values: list[int]) -> int:
        return values[-1] - values[0] if len(values) > 1 else 0

    @property
    def host_growth(self) -> int:
        # RSS sees native buffers too; tracemalloc is exact for Python objects: take the larger.
        return max(self._growth(self.rss), self._growth(self.python))

    @property
    def device_growth(self) -> dict[str, int]:
        return {dev: self._growth(v) for dev, v in self.device.items()}

    @property
    def leaked(self) -> bool:
        return self.host_growth > self.limit or any(
            g > self.limit for g in self.device_growth.values()
        )

    def summary(self) -> str:
        calls = len(self.rss) - 1
        steps = ", ".join(
            f"{format_bytes(b - a)}" for a, b in zip(self.rss[:-1], self.rss[1:], strict=True)
        )
        line = (
            f"host memory grew by {format_bytes(self.host_growth)} over {calls} calls "
            f"(limit {format_bytes(self.limit)}; RSS per call: {steps or 'n/a'}; Python "
            f"allocations: {format_bytes(self._growth(self.python))})"
        )
        for dev, grew in self.device_growth.items():
            line += f"; {dev} allocated grew by {format_bytes(grew)}"
        if self.grown:
            line += "; lines that grew: " + "; ".join(map(str, self.grown))
        return line


def _device_allocated() -> dict[str, int]:
    return {dev: _devices.memory_stats(dev)["allocated"] for dev in _devices.in_use()}


def check_leaks(
    fn: Callable[[], Any],
    limit: str | int = "1 MB",
    *,
    warmup: int = 2,
    iterations: int = 5,
    top: int = 5,
    raise_on_leak: bool = True,
) -> LeakReport:
    """Call `fn()` `warmup + iterations` times; raise MemoryLeakDetected (or return the report
    with `.leaked` set, with raise_on_leak=False) when memory grew by more than `limit`."""
    if warmup < 0 or iterations < 2:
        raise UsageError(
            f"check_leaks needs warmup >= 0 and iterations >= 2 (got warmup={warmup}, "
            f"iterations={iterations}): growth is measured between calls."
        )
    report = LeakReport(parse_size(limit, "leak limit"))
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    proc = psutil.Process()
    first: tracemalloc.Snapshot | None = None
    try:
        for _ in range(warmup):
            fn()
        for i in range(iterations + 1):
            if i:
                fn()
            settle()
            report.rss.append(proc.memory_info().rss)
            report.python.append(tracemalloc.get_traced_memory()[0])
            for dev, allocated in _device_allocated().items():
                report.device.setdefault(dev, []).append(allocated)
            if i == 0 and top:
                first = without_noise(tracemalloc.take_snapshot())
        if first is not None and report.leaked:
            diff = without_noise(tracemalloc.take_snapshot()).compare_to(first, "lineno")
            report.grown = [
                Allocation(
                    f"{d.traceback[0].filename}:{d.traceback[0].lineno}", d.size_diff, d.count_diff
                )
                for d in diff[:top]
                if d.size_diff >= 1024
            ]
    finally:
        if started:
            tracemalloc.stop()
    if report.leaked and raise_on_leak:
        raise MemoryLeakDetected(
            f"a leak: {report.summary()}. Keep no references across calls (global lists, "
            "caches keyed by inputs, tensors that hold their graph), or raise the limit.",
            report=report,
        )
    return report
