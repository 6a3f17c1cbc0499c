"""`run_command`: the peak memory of a command with every child and grandchild it starts.

`/usr/bin/time -v` reports the largest single process the shell waited for; launchers that
start launchers (torchrun, accelerate, pytest -n) under-report. Here the whole tree is sampled
from outside (this process is not counted) and combined with the kernel's max RSS of the
descendants that were waited for (getrusage RUSAGE_CHILDREN), so a grandchild that lived
shorter than one sampling interval is still counted.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tinykit._files import atomic_file, check_output_file
from tinykit._procs import run_command as run_procs
from tinykit.errors import SetupError, UsageError
from tinykit.memory.sampler import TreeSampler
from tinykit.memory.sizes import format_bytes

__all__ = ["CommandMemory", "check_plot_path", "plot_timeline", "run_command"]

_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024


@dataclass
class CommandMemory:
    """What `run_command` measured, in bytes and seconds."""

    command: list[str]
    returncode: int
    peak: int
    peak_sampled: int
    peak_kernel: int  # the largest single descendant the kernel saw (0: none waited for)
    duration_s: float
    interval_s: float
    samples: list[tuple[float, int]] = field(default_factory=list)
    timed_out: bool = False

    @property
    def peak_source(self) -> str:
        return "sampled process tree" if self.peak_sampled >= self.peak_kernel else "kernel max RSS"

    def summary(self) -> str:
        return (
            f"peak {format_bytes(self.peak)} ({self.peak_source}; tree sampled every "
            f"{self.interval_s * 1000:g} ms: {format_bytes(self.peak_sampled)}, largest process "
            f"by the kernel: {format_bytes(self.peak_kernel)}) over {self.duration_s:.2f} s, "
            f"exit code {self.returncode}"
            + (" (stopped at its timeout: its process group got SIGTERM)" if self.timed_out else "")
        )

    def to_dict(self, samples: bool = False) -> dict[str, Any]:
        data = asdict(self)
        data["peak_source"] = self.peak_source
        if not samples:
            data.pop("samples")
        return data


def run_command(
    command: list[str], interval: float = 0.01, *, timeout: float | None = None
) -> CommandMemory:
    """Run `command` (its output passes through) and measure the peak memory of its tree.

    It runs in its own process group (`tinykit._procs`): Ctrl-C, SIGTERM and `timeout` end
    the whole tree. `returncode` is the shell's: 128 + N for a command killed by signal N,
    124 when the timeout stopped it (`timed_out`)."""
    if not command:
        raise UsageError("no command to measure. Put it after --, e.g. -- python train.py.")
    if not 0 < interval <= 10:
        raise UsageError(f"interval {interval} s is out of range: use 0 < interval <= 10.")
    if shutil.which(command[0]) is None:
        raise UsageError(
            f"command {command[0]!r} was not found on PATH. Check the spelling, or give its path."
        )
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * _MAXRSS_UNIT
    # A child's max RSS starts with the pages of this process it was forked from: below our
    # own RSS, the kernel's figure may be that image, not the command.
    floor = max(before, psutil.Process().memory_info().rss)
    t0 = time.monotonic()
    samplers: list[TreeSampler] = []

    def watch(proc: subprocess.Popen) -> None:
        samplers.append(TreeSampler(proc.pid, include_root=True, interval=interval))
        samplers[0].start()

    try:
        # its own process group: Ctrl-C, SIGTERM and the timeout reach the whole tree
        done = run_procs(command, timeout=timeout, on_start=watch)
    finally:
        for sampler in samplers:
            sampler._halt.set()
            sampler.join()
            sampler.close()
    sampler = samplers[0]
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * _MAXRSS_UNIT
    # RUSAGE_CHILDREN is a max over every child ever waited for: it speaks for this command
    # only when it rose above what this process ran before and its own fork image.
    kernel = after if after > floor else 0
    return CommandMemory(
        list(command),
        done.returncode,
        max(sampler.peak, kernel),
        sampler.peak,
        kernel,
        time.monotonic() - t0,
        interval,
        sampler.samples,
        done.timed_out,
    )


def check_plot_path(path: str | Path, *, force: bool = True) -> None:
    """Fail before any work when --plot cannot be written: no matplotlib, not a .png, its
    folder missing or read-only, or (without `force`) the file exists."""
    if Path(path).suffix.lower() != ".png":
        raise UsageError(f"--plot {path}: the plot is a PNG; name the file *.png.")
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise SetupError(
            "--plot needs matplotlib, which is not installed. Install it: "
            "pip install 'tinykit[plot]' (or pip install matplotlib)."
        )
    check_output_file(path, force, "--plot")


def plot_timeline(
    samples: list[tuple[float, int]], path: str | Path, title: str, peak: int | None = None
) -> Path:
    """Write a PNG of memory over time (matplotlib, the `plot` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise SetupError(
            "--plot needs matplotlib, which is not installed. Install it: "
            "pip install 'tinykit[plot]' (or pip install matplotlib)."
        ) from None
    check_plot_path(path)
    out = Path(path)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot([t for t, _ in samples], [b / 1e6 for _, b in samples], lw=1.2)
    if peak:
        ax.axhline(peak / 1e6, ls="--", lw=0.8, color="red", label=f"peak {format_bytes(peak)}")
        ax.legend(loc="lower right")
    ax.set_xlabel("seconds")
    ax.set_ylabel("RSS of the process tree (MB)")
    ax.set_title(" ".join(title.split())[:90])  # one line, even for a multi-line -c script
    fig.tight_layout()
    try:
        with atomic_file(out) as tmp:  # never a half-written PNG under the asked name
            fig.savefig(tmp, format="png", dpi=100)
    finally:
        plt.close(fig)
    return out
