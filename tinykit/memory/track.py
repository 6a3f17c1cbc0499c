"""`track_memory`: peak and delta of host and accelerator memory over a block of code.

    with track_memory(top=5) as m:
        train_step(model, batch)
    print(m.summary())              # host peak +412.0 MB (...), cuda:0 peak +1.2 GB, top lines

Host memory is the RSS of this process plus all its descendants, sampled by a background thread
(psutil), combined with the kernel's max RSS of this process (VmHWM): the kernel counts every
page at its peak, the sampler sees the sum over live processes, and either alone misses peaks (a spike
between two samples, or while a C call holds the GIL so that the sampler cannot run; a tree of
processes whose sum is more than any one of them). Like the accelerator peaks, the kernel's
peak counter of this process is reset at entry (Linux `clear_refs`; ``exact_peak=False`` leaves
it alone), which makes the kernel figure the block's exact peak; tools that read the lifetime
peak later (`/usr/bin/time`) then see the peak since the last reset.

Modules the block imports for the first time are the block's warm-up, not its own use (a test
that builds the first transformers model of a process imports its modeling code): their RSS
growth is measured (`tinykit.memory.warmup`), reported as `import_bytes`, and left out of the
host budget, which bounds `host_peak_own`, so a test gets the same verdict whatever ran before it.

Accelerator memory (allocated, reserved, peaks reset at entry) is read only for devices this
process already initialised, or initialised inside the block: tracking never creates a CUDA
context (tinykit._devices). On CPU-only torch the report says "no accelerator in use".
"""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import sys
import threading
import time
import tracemalloc
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from tinykit import _devices
from tinykit.errors import MemoryBudgetExceeded
from tinykit.memory.sampler import DEFAULT_INTERVAL_S, TreeSampler
from tinykit.memory.sizes import format_bytes, parse_size
from tinykit.memory.warmup import ImportMeter

__all__ = [
    "Allocation",
    "DeviceMemory",
    "MemoryBudgetExceeded",
    "MemoryReport",
    "call_tracked",
    "track_memory",
]

HOST, DEVICE = "host", "device"  # the memories a budget bounds (MemoryBudgetExceeded.kind)
# getrusage's ru_maxrss is in KiB on Linux and in bytes on macOS
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024
_PSUTIL_FILES = os.path.join(os.path.dirname(psutil.__file__), "*")
_ACTIVE: list[track_memory] = []  # open trackers, innermost last (nested peak resets)


@dataclass
class Allocation:
    """Python allocations still alive at one source line (tracemalloc)."""

    where: str
    size: int
    count: int

    def __str__(self) -> str:
        return f"{self.where}: {format_bytes(self.size)} in {self.count} block(s)"


@dataclass
class DeviceMemory:
    """One accelerator's counters over the block, in bytes."""

    device: str
    allocated_start: int
    allocated_end: int
    peak_allocated: int
    reserved_end: int
    peak_reserved: int

    @property
    def peak_delta(self) -> int:
        return self.peak_allocated - self.allocated_start


@dataclass
class MemoryReport:
    """What `track_memory` measured; filled in when the block exits."""

    host_start: int = 0
    host_end: int = 0
    host_peak: int = 0
    host_peak_source: str = "sampled"  # or "kernel max RSS" (of this process, or of a child)
    samples: list[tuple[float, int]] = field(default_factory=list)  # (seconds, bytes)
    devices: dict[str, DeviceMemory] = field(default_factory=dict)
    device_note: str = ""
    top: list[Allocation] = field(default_factory=list)
    top_source: str = ""  # how `top` was found when not in this block (the marker's rerun)
    python_peak: int | None = None  # tracemalloc's peak of Python allocations, when traced
    duration_s: float = 0.0
    interval_s: float = DEFAULT_INTERVAL_S
    sampler_cpu_s: float = 0.0  # CPU seconds the sampler thread itself used (its overhead)
    import_bytes: int = 0  # what first-time imports in the block added (the warm-up)
    imports: list[tuple[str, int]] = field(default_factory=list)  # the largest of them

    @property
    def host_peak_own(self) -> int:
        """The peak's rise less the warm-up: what a host budget bounds."""
        return max(0, self.host_peak_delta - self.import_bytes)

    @property
    def host_peak_delta(self) -> int:
        """How far the peak rose above the memory in use at entry."""
        return max(0, self.host_peak - self.host_start)

    @property
    def host_delta(self) -> int:
        return self.host_end - self.host_start

    @property
    def device_peak_delta(self) -> int | None:
        """The largest rise of any device's allocated memory over its value at entry."""
        return max((d.peak_delta for d in self.devices.values()), default=None)

    def summary(self) -> str:
        line = (
            f"host peak +{format_bytes(self.host_peak_delta)} (peak {format_bytes(self.host_peak)}"
            f" by {self.host_peak_source}, start {format_bytes(self.host_start)}, end "
            f"{format_bytes(self.host_end)}) over {self.duration_s:.2f} s"
        )
        for d in self.devices.values():
            line += (
                f"; {d.device} peak +{format_bytes(d.peak_delta)} (allocated "
                f"{format_bytes(d.peak_allocated)}, reserved {format_bytes(d.peak_reserved)})"
            )
        if self.import_bytes:
            names = ", ".join(m for m, _ in self.imports[:3])
            line += (
                f"; first-time imports +{format_bytes(self.import_bytes)} ({names}), not "
                "counted against a budget"
            )
        if self.device_note:
            line += f"; {self.device_note}"
        if self.top or self.top_source:
            source = f" ({self.top_source})" if self.top_source else ""
            line += f"; top allocations{source}: " + ("; ".join(map(str, self.top)) or "none")
        return line

    def to_dict(self, samples: bool = True) -> dict[str, Any]:
        data = asdict(self)
        data["host_peak_delta"] = self.host_peak_delta
        data["host_delta"] = self.host_delta
        data["device_peak_delta"] = self.device_peak_delta
        data["host_peak_own"] = self.host_peak_own
        if not samples:
            data.pop("samples")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryReport:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["devices"] = {k: DeviceMemory(**v) for k, v in known.get("devices", {}).items()}
        known["top"] = [Allocation(**a) for a in known.get("top", [])]
        known["samples"] = [tuple(s) for s in known.get("samples", [])]
        known["imports"] = [tuple(i) for i in known.get("imports", [])]
        return cls(**known)


def _maxrss(who: int) -> int:
    if who == resource.RUSAGE_SELF:
        # VmHWM is the counter clear_refs resets; getrusage also keeps the peak seen when any
        # thread exited (the sampler's own thread, say), which no reset clears.
        with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    return resource.getrusage(who).ru_maxrss * _MAXRSS_UNIT


def _reset_kernel_peak() -> bool:
    """Reset this process's peak RSS counter (Linux >= 4.0: `5` into /proc/self/clear_refs)."""
    for t in _ACTIVE:  # outer blocks keep the peak they had seen so far
        t._kernel_floor = max(t._kernel_floor, _maxrss(resource.RUSAGE_SELF))
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class track_memory(contextlib.ContextDecorator):  # noqa: N801 - used like a function
    """Measure host and accelerator memory over a block (a context manager or a decorator).

    Args:
        interval: seconds between RSS samples of the process tree.
        top: report the N source lines with the most live Python allocations near the peak
            (tracemalloc; slows Python allocation down while it runs).
        exact_peak: reset the kernel's peak RSS counter at entry (default): the block's exact
            peak. False keeps the lifetime counter; the peak is then sampled unless the
            block sets a new lifetime record.
        host, device: budgets ("200 MB"); exceeding one raises MemoryBudgetExceeded at exit.
            The host budget bounds the peak's rise over entry, the device budget the rise of
            allocated memory on any device.

    `.report` holds the last block's MemoryReport (also what `with ... as m` gives).
    """

    def __init__(
        self,
        *,
        interval: float = DEFAULT_INTERVAL_S,
        top: int = 0,
        exact_peak: bool = True,
        host: str | int | None = None,
        device: str | int | None = None,
    ) -> None:
        self.interval, self.top, self.exact_peak = interval, top, exact_peak
        self.host_budget = None if host is None else parse_size(host, "host budget")
        self.device_budget = None if device is None else parse_size(device, "device budget")
        self.report = MemoryReport(interval_s=interval)

    def __enter__(self) -> MemoryReport:
        self.report = report = MemoryReport(interval_s=self.interval)
        self._started_tracing = self.top > 0 and not tracemalloc.is_tracing()
        if self._started_tracing:
            tracemalloc.start()
        if self.top:
            tracemalloc.reset_peak()
        self._last_snapshot = 0.0
        self._snapshot: tracemalloc.Snapshot | None = None
        self._kernel_floor = 0
        self._kernel_reset = self.exact_peak and _reset_kernel_peak()
        self._self0 = _maxrss(resource.RUSAGE_SELF)
        self._device_start: dict[str, int] = {}
        for dev in _devices.in_use():
            for t in _ACTIVE:  # fold the peak so far into the outer blocks before resetting
                t._device_seen(dev)
            self._device_start[dev] = _devices.memory_stats(dev)["allocated"]
            _devices.reset_peak_memory(dev)
        self._device_peaks: dict[str, tuple[int, int]] = {}
        self._sampler = TreeSampler(
            os.getpid(), True, self.interval, self._maybe_snapshot if self.top else None
        )
        report.host_start = self._sampler.sample()
        self._imports = ImportMeter().start()
        self._t0 = time.monotonic()
        _ACTIVE.append(self)
        self._sampler.start()
        return report

    def _device_seen(self, dev: str) -> None:
        stats = _devices.memory_stats(dev)
        old = self._device_peaks.get(dev, (0, 0))
        self._device_peaks[dev] = (
            max(old[0], stats["peak_allocated"]),
            max(old[1], stats["peak_reserved"]),
        )

    def _maybe_snapshot(self, rss: int) -> None:
        # From the sampler thread: a snapshot near the peak names what was alive at the peak,
        # which a snapshot at exit (after the test freed it) cannot. At most 5 per second.
        now = time.monotonic()
        if now - self._last_snapshot >= 0.2 and tracemalloc.is_tracing():
            self._last_snapshot = now
            self._snapshot = tracemalloc.take_snapshot()

    def __exit__(self, *exc: object) -> None:
        report = self.report
        report.duration_s = time.monotonic() - self._t0
        self._imports.stop()
        report.import_bytes, report.imports = self._imports.bytes, self._imports.top()
        sampled = self._sampler.stop()
        _ACTIVE.remove(self)
        report.samples = self._sampler.samples
        report.sampler_cpu_s = self._sampler.cpu_s
        report.host_end = self._sampler.sample()
        self._sampler.close()
        report.host_peak, report.host_peak_source = sampled, "sampled"
        self_peak = max(_maxrss(resource.RUSAGE_SELF), self._kernel_floor)
        # The kernel's lifetime max speaks for this block only if the block set a new record.
        if (self._kernel_reset or self_peak > self._self0) and self_peak > report.host_peak:
            report.host_peak, report.host_peak_source = self_peak, "kernel max RSS"
        self._read_devices(report)
        if self.top:
            self._read_top(report)
        if exc[0] is None:
            self.check(report)

    def _read_devices(self, report: MemoryReport) -> None:
        for dev in _devices.in_use():  # also devices first initialised inside the block
            self._device_seen(dev)
            stats = _devices.memory_stats(dev)
            peak_alloc, peak_reserved = self._device_peaks[dev]
            report.devices[dev] = DeviceMemory(
                dev,
                self._device_start.get(dev, 0),
                stats["allocated"],
                peak_alloc,
                stats["reserved"],
                peak_reserved,
            )
        if not report.devices:
            report.device_note = (
                "no accelerator in use"
                if "torch" not in sys.modules or _devices.gpu_count() == 0
                else "accelerator present but not used by this code (not initialised)"
            )

    def _read_top(self, report: MemoryReport) -> None:
        report.python_peak = tracemalloc.get_traced_memory()[1]
        snapshot = self._snapshot or tracemalloc.take_snapshot()
        if self._started_tracing:
            tracemalloc.stop()
        snapshot = without_noise(snapshot)
        stats = snapshot.statistics("lineno")[: self.top]
        floor = max(1024, stats[0].size // 1000) if stats else 0  # leave out the crumbs
        report.top = [
            Allocation(f"{s.traceback[0].filename}:{s.traceback[0].lineno}", s.size, s.count)
            for s in stats
            if s.size >= floor
        ]

    def check(self, report: MemoryReport) -> None:
        """Raise MemoryBudgetExceeded when the report is over a budget of this tracker."""
        if self.host_budget is not None and report.host_peak_own > self.host_budget:
            raise MemoryBudgetExceeded(
                f"host memory peaked at +{format_bytes(report.host_peak_own)}, over the budget "
                f"of {format_bytes(self.host_budget)}: {report.summary()}. Free memory earlier, "
                "use smaller inputs, or raise the budget.",
                kind=HOST,
                used=report.host_peak_own,
                budget=self.host_budget,
                report=report.to_dict(samples=False),
            )
        used = report.device_peak_delta
        if self.device_budget is not None and used is not None and used > self.device_budget:
            raise MemoryBudgetExceeded(
                f"device memory peaked at +{format_bytes(used)}, over the budget of "
                f"{format_bytes(self.device_budget)}: {report.summary()}. Free tensors earlier, "
                "use smaller inputs, or raise the budget.",
                kind=DEVICE,
                used=used,
                budget=self.device_budget,
                report=report.to_dict(samples=False),
            )


def without_noise(snapshot: tracemalloc.Snapshot) -> tracemalloc.Snapshot:
    """The snapshot less what measuring allocates (the sampler thread, tracemalloc, ctypes)."""
    import ctypes

    noise = (tracemalloc.__file__, threading.__file__, ctypes.__file__, __file__, _PSUTIL_FILES)
    return snapshot.filter_traces([tracemalloc.Filter(False, f) for f in noise])


def settle() -> None:
    """Collect garbage and hand freed heap back to the OS, so RSS shows what is really live."""
    gc.collect()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)


def call_tracked(
    fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], interval: float = DEFAULT_INTERVAL_S
) -> dict[str, Any]:
    """Call `fn` under track_memory and return its value and the report (a rank of a
    tinykit_dist test runs its body through this, so each rank reports its own peak)."""
    from tinykit._child import FunctionRef

    if isinstance(fn, FunctionRef):
        fn = fn.resolve()
    with track_memory(interval=interval) as m:
        value = fn(*args, **kwargs)
    return {"value": value, "memory": m.to_dict(samples=False)}
