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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from tinykit import _devices
from tinykit.errors import MemoryBudgetExceeded
from tinykit.memory.sizes import format_bytes, parse_size

__all__ = [
    "Allocation",
    "DeviceMemory",
    "MemoryBudgetExceeded",
    "MemoryReport",
    "call_tracked",
    "track_memory",
]

# 50 ms: the kernel's VmHWM already holds every peak of this process; the sampler adds its
# children (a 100 ms spike is still caught) and the timeline. Each wake-up costs ~0.2 ms of CPU
# on a loaded box: at 20 ms the sampler thread used 2.8% of a busy 1-thread workload's CPU.
DEFAULT_INTERVAL_S = 0.05
CHILDREN_REFRESH_S = 0.1  # new descendants are looked for this often (a /proc walk)
MAX_SAMPLES = 20_000  # the timeline is thinned (every other sample dropped) beyond this
HOST, DEVICE = "host", "device"  # the memories a budget bounds (MemoryBudgetExceeded.kind)
# getrusage's ru_maxrss is in KiB on Linux and in bytes on macOS
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
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
        if not samples:
            data.pop("samples")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryReport:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["devices"] = {k: DeviceMemory(**v) for k, v in known.get("devices", {}).items()}
        known["top"] = [Allocation(**a) for a in known.get("top", [])]
        known["samples"] = [tuple(s) for s in known.get("samples", [])]
        return cls(**known)


def descendants(pid: int) -> list[int]:
    """Every descendant of `pid`. On Linux from /proc/<pid>/task/*/children, which costs
    microseconds where psutil's `children(recursive=True)` reads every process's stat file."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
            kids = []
            for tid in tasks:
                with contextlib.suppress(OSError), open(f"/proc/{parent}/task/{tid}/children") as f:
                    kids += [int(x) for x in f.read().split()]
        except OSError:  # not Linux, or no CONFIG_PROC_CHILDREN, or the process is gone
            if parent != pid:
                continue
            with contextlib.suppress(psutil.Error):
                return [c.pid for c in psutil.Process(pid).children(recursive=True)]
            return []
        found += kids
        todo += kids
    return found


class TreeSampler(threading.Thread):
    """Samples the RSS of a process tree until stopped: its peak and a (thinned) timeline."""

    def __init__(
        self,
        root: int,
        include_root: bool = True,
        interval: float = DEFAULT_INTERVAL_S,
        on_new_peak: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(name="tinykit-memory-sampler", daemon=True)
        self.root, self.include_root, self.interval = root, include_root, interval
        self.on_new_peak = on_new_peak
        self.peak = 0
        self.cpu_s = 0.0
        self.samples: list[tuple[float, int]] = []
        self._stride = 1
        self._halt = threading.Event()
        self._procs: dict[int, psutil.Process] = {}
        self._statm: dict[int, int] = {}  # pid -> open fd of /proc/<pid>/statm
        self._t0 = time.monotonic()
        with contextlib.suppress(psutil.Error):
            self._procs[root] = psutil.Process(root)
        self._refresh()  # the tree at entry is the baseline: children that exist already count

    def sample(self) -> int:
        total = 0
        for pid, proc in list(self._procs.items()):
            if pid == self.root and not self.include_root:
                continue
            try:
                total += self._rss(pid, proc)
            except (psutil.Error, OSError, ValueError):  # it ended between walk and read
                self._procs.pop(pid, None)
                if (fd := self._statm.pop(pid, None)) is not None:
                    os.close(fd)
        return total

    def _rss(self, pid: int, proc: psutil.Process) -> int:
        # One pread of /proc/<pid>/statm (its second field: resident pages) holds the GIL for
        # microseconds where psutil's memory_info takes ~50: the measured code waits less.
        fd = self._statm.get(pid)
        if fd is None:
            try:
                fd = self._statm[pid] = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
            except OSError:
                return int(proc.memory_info().rss)
        return int(os.pread(fd, 128, 0).split()[1]) * _PAGE

    def close(self) -> None:
        for fd in self._statm.values():
            os.close(fd)
        self._statm.clear()

    def _refresh(self) -> None:
        for pid in descendants(self.root):
            if pid not in self._procs:
                with contextlib.suppress(psutil.Error):
                    self._procs[pid] = psutil.Process(pid)

    def run(self) -> None:
        try:
            self._loop()
        finally:
            self.cpu_s = time.thread_time()  # this thread's own CPU: the sampler's direct cost

    def _loop(self) -> None:
        next_refresh = time.monotonic() + CHILDREN_REFRESH_S
        n = 0
        while True:
            now = time.monotonic()
            if now >= next_refresh:
                self._refresh()
                next_refresh = now + CHILDREN_REFRESH_S
            rss = self.sample()
            if rss > self.peak:
                self.peak = rss
                if self.on_new_peak is not None:
                    self.on_new_peak(rss)
            if n % self._stride == 0:
                self.samples.append((now - self._t0, rss))
                if len(self.samples) > MAX_SAMPLES:
                    self.samples = self.samples[::2]
                    self._stride *= 2
            n += 1
            if self._halt.wait(self.interval):
                return

    def stop(self) -> int:
        """Stop, take one last sample, and return the peak."""
        self._halt.set()
        if self.is_alive():
            self.join()
        self.peak = max(self.peak, self.sample())
        return self.peak


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
        if self.host_budget is not None and report.host_peak_delta > self.host_budget:
            raise MemoryBudgetExceeded(
                f"host memory peaked at +{format_bytes(report.host_peak_delta)}, over the budget "
                f"of {format_bytes(self.host_budget)}: {report.summary()}. Free memory earlier, "
                "use smaller inputs, or raise the budget.",
                kind=HOST,
                used=report.host_peak_delta,
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
