"""How long check_determinism takes on a tiny Llama and a tiny Qwen3-MoE (2 AdamW steps each).

    python benchmarks/determinism.py [--reps 3]

Baseline: the same runs without the checker, measured side by side in this script. In-process:
two seeded calls of the step function here. Process mode: two fresh interpreters, started
together as the checker starts them, that import the step and run it once without recording.
Each figure is the median of --reps repetitions (wall-clock seconds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import determinism_cases as cases  # noqa: E402

from tinykit.determinism import check_determinism  # noqa: E402
from tinykit.seed import seed_everything  # noqa: E402


def median_seconds(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def plain_inprocess(step) -> None:
    for _ in range(2):
        seed_everything(0)
        step()


def plain_processes(name: str) -> None:
    code = ("from tinykit.seed import seed_everything; import determinism_cases as c; "
            f"seed_everything(0); c.{name}()")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
    if any(p.wait() != 0 for p in procs):
        raise SystemExit(f"plain run of {name} failed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; median of {args.reps}")
    print(f"{'model':<8}{'mode':<11}{'check (s)':>10}{'baseline (s)':>14}"
          f"{'ratio':>8}{'records':>9}")
    for arch in ("llama", "moe"):
        name = f"{arch}_clean"
        step = getattr(cases, name)
        plain_inprocess(step)  # warm-up: transformers imports, first-call allocations
        report = check_determinism(step, mode="inprocess")
        for mode in ("inprocess", "process"):
            check = median_seconds(partial(check_determinism, step, mode=mode), args.reps)
            plain = partial(plain_inprocess, step) if mode == "inprocess" else partial(
                plain_processes, name)
            base = median_seconds(plain, args.reps)
            print(f"{arch:<8}{mode:<11}{check:>10.2f}{base:>14.2f}{check / base:>7.2f}x"
                  f"{report.records:>9}")


if __name__ == "__main__":
    main()
