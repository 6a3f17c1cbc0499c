"""How long check_determinism takes on a tiny Llama and a tiny Qwen3-MoE (2 AdamW steps each).

    python benchmarks/determinism.py [--reps 3]

Baseline: the same runs without the checker, measured side by side in this script. In-process:
two seeded calls of the step function here. Process mode: two fresh interpreters, started
together as the checker starts them, that import the step and run it once without recording.
Check and baseline alternate, --reps times each; the table gives the medians of wall-clock and of
CPU seconds (this process plus its children). The ratio uses CPU seconds, which a busy shared
machine disturbs far less than wall-clock.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import determinism_cases as cases  # noqa: E402

from tinykit.numerics.determinism import check_determinism  # noqa: E402
from tinykit.repro.seed import seed_everything  # noqa: E402


def cpu_seconds() -> float:
    """CPU time of this process and its finished children: steadier than wall time on a busy box."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measure(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), cpu_seconds()
    fn()
    return time.perf_counter() - wall, cpu_seconds() - cpu


def interleaved(check, baseline, reps: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """Median (wall, cpu) of check and of baseline, alternating so both see the same load."""
    pairs = [(measure(check), measure(baseline)) for _ in range(reps)]
    med = statistics.median
    return (
        (med(c[0] for c, _ in pairs), med(c[1] for c, _ in pairs)),
        (med(b[0] for _, b in pairs), med(b[1] for _, b in pairs)),
    )


def plain_inprocess(step) -> None:
    for _ in range(2):
        seed_everything(0)
        step()


def plain_processes(name: str) -> None:
    code = (
        "from tinykit.repro.seed import seed_everything; import determinism_cases as c; "
        f"seed_everything(0); c.{name}()"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
    if any(p.wait() != 0 for p in procs):
        raise SystemExit(f"plain run of {name} failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    import torch

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}; median of {args.reps}"
    )
    print(
        f"{'model':<7}{'mode':<10}{'check wall/cpu (s)':>20}{'baseline wall/cpu (s)':>23}"
        f"{'ratio (cpu)':>13}{'records':>9}"
    )
    for arch in ("llama", "moe"):
        name = f"{arch}_clean"
        step = getattr(cases, name)
        plain_inprocess(step)  # warm-up: transformers imports, first-call allocations
        report = check_determinism(step, mode="inprocess")
        for mode in ("inprocess", "process"):
            plain = (
                partial(plain_inprocess, step)
                if mode == "inprocess"
                else partial(plain_processes, name)
            )
            (cw, cc), (bw, bc) = interleaved(
                partial(check_determinism, step, mode=mode), plain, args.reps
            )
            print(
                f"{arch:<7}{mode:<10}{cw:>11.2f} /{cc:>6.2f}{bw:>14.2f} /{bc:>6.2f}"
                f"{cc / bc:>12.2f}x{report.records:>9}"
            )


if __name__ == "__main__":
    main()
