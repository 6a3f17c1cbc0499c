"""Benchmark: how fast a usage error answers, beside the floor of starting Python + tinykit.

    python benchmarks/usage_errors.py [--runs 5]

Each case is a whole `python -m tinykit ...` process that must fail with exit 2 (and a "did you
mean" where one exists) before torch or transformers is imported. The floor is
`python -c "import tinykit"`: no check can answer faster than the interpreter starts.
Prints the median wall seconds of each case, its margin over the floor, and the message.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = {
    "unknown model type": ["make-tiny", "lama"],
    "model type, wrong case": ["make-tiny", "Llama"],
    "model type, - for _": ["make-tiny", "qwen3-moe"],
    "missing folder (make-tiny)": ["make-tiny", "./no-such-folder"],
    "missing folder (verify)": ["verify", "./no-such-folder"],
    "bad flag": ["make-tiny", "llama", "--hiden", "8"],
    "unknown command": ["maketiny", "llama"],
}


def timed(argv: list[str], runs: int) -> tuple[float, subprocess.CompletedProcess]:
    times, done = [], None
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
        times.append(time.perf_counter() - start)
    assert done is not None
    return statistics.median(times), done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    floor, _ = timed([sys.executable, "-c", "import tinykit"], runs)
    print(f"{'case':<28} {'median s':>8} {'over floor':>10}  message")
    print(f"{'floor: import tinykit':<28} {floor:>8.3f} {'':>10}")
    for name, args in CASES.items():
        seconds, done = timed([sys.executable, "-m", "tinykit", *args], runs)
        if done.returncode != 2:
            raise SystemExit(f"{name}: exit {done.returncode}, expected 2: {done.stderr[-300:]}")
        message = done.stderr.strip().splitlines()[-1]
        print(f"{name:<28} {seconds:>8.3f} {seconds - floor:>+10.3f}  {message[:90]}")


if __name__ == "__main__":
    main()
