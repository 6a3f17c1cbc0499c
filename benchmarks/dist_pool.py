"""20 two-rank CPU tests: warm rank pool vs a fresh spawn per test, side by side in one run.

    python benchmarks/dist_pool.py [--tests 20]

Each "test" is a real pytest test marked `tinykit_dist(world_size=2)` that takes one DDP step
of a tiny model on 2 gloo ranks and checks the parameters agree on both ranks. The same file is
run twice with pytest: once as is (warm pool) and once with `--tinykit-dist-fresh` (new rank
processes for every test, the baseline). Reported per test: the sum of pytest's own test times
(setup + call + teardown, from --junitxml) divided by the number of tests, the first test
(which starts the warm pool) included; the first test and the median alone; and the whole
session's wall time (pytest start-up included).
Goal (issue #8): <= 1 s per warm test and >= 3x faster than fresh spawns.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

TEST_FILE = """
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tinykit.distributed import assert_equal_on_all_ranks


@pytest.mark.tinykit_dist(world_size=2)
@pytest.mark.parametrize("i", range({n}))
def test_ddp_step(i):
    torch.manual_seed(i)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                                        torch.nn.Linear(16, 1)))
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(dist.get_rank()))
    model(x).pow(2).mean().backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    for p in model.parameters():
        assert_equal_on_all_ranks(p.detach())
"""


def run_session(test_file: Path, *extra: str) -> tuple[float, list[float]]:
    """(wall seconds, per-test seconds in run order) of one pytest session."""
    junit = test_file.with_suffix(f".{len(extra)}.xml")
    pythonpath = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=pythonpath)
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            f"--junitxml={junit}",
            str(test_file),
            *extra,
        ],
        cwd=test_file.parent,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"benchmark session failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    cases = ET.parse(junit).getroot().iter("testcase")
    return wall, [float(c.get("time", 0)) for c in cases]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=20)
    n = parser.parse_args().tests
    with tempfile.TemporaryDirectory(prefix="tinykit-bench-") as tmp:
        test_file = Path(tmp) / "test_bench_dist.py"
        test_file.write_text(TEST_FILE.replace("{n}", str(n)))
        warm_wall, warm_times = run_session(test_file)
        fresh_wall, fresh_times = run_session(test_file, "--tinykit-dist-fresh")
    assert len(warm_times) == len(fresh_times) == n, (len(warm_times), len(fresh_times))
    warm, fresh = sum(warm_times) / n, sum(fresh_times) / n
    print(
        f"{n} two-rank CPU tests (gloo, DDP step of a tiny model), cores={os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"{'mode':<24}{'per test (s)':>13}{'first (s)':>11}{'median (s)':>12}"
        f"{'all tests (s)':>15}{'session wall (s)':>18}"
    )
    for label, times, wall in (
        ("warm pool (tinykit)", warm_times, warm_wall),
        ("fresh spawn (baseline)", fresh_times, fresh_wall),
    ):
        median = statistics.median(times)
        print(
            f"{label:<24}{sum(times) / n:>13.3f}{times[0]:>11.2f}{median:>12.3f}"
            f"{sum(times):>15.2f}{wall:>18.2f}"
        )
    print(
        f"speed-up per test: {fresh / warm:.1f}x (goal >= 3x); warm per test {warm:.3f} s "
        f"including pool start-up (goal <= 1 s); session speed-up {fresh_wall / warm_wall:.1f}x"
    )


if __name__ == "__main__":
    main()
