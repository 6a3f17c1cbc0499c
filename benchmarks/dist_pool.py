"""Distributed tests on CPU: warm rank pools vs fresh processes, side by side in one run.

    python benchmarks/dist_pool.py [--tests 20] [--node-tests 20] [--torchrun-tests 3]
                                   [--only ranks|nodes]

Part 1 (ranks): 20 two-rank tests, warm pool vs a fresh spawn per test.
Part 2 (nodes): two emulated nodes × two ranks, `tinykit_dist(nodes=2, procs_per_node=2)` on a
warm pool vs the usual way to test a multi-node program: a fresh `torchrun` per test (here
`run_torchrun`: one real torchrun agent per node, c10d on loopback, 4 workers). Goal (issue
#30): <= 1 s per warm 2×2 test.

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


NODES_TEST_FILE = """
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tinykit.distributed import RankInfo, assert_equal_on_all_ranks


def ddp_step(i):
    torch.manual_seed(i)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                                        torch.nn.Linear(16, 1)))
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(dist.get_rank()))
    model(x).pow(2).mean().backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    for p in model.parameters():
        assert_equal_on_all_ranks(p.detach())
    assert RankInfo().node_rank == dist.get_rank() // 2


@pytest.mark.tinykit_dist(nodes=2, procs_per_node=2)
@pytest.mark.parametrize("i", range({n}))
def test_warm(i):
    ddp_step(i)


if __name__ == "__main__":  # one torchrun worker of the baseline
    import os
    import sys

    dist.init_process_group("gloo")
    ddp_step(int(sys.argv[1]))
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # about 1 exit in 12 aborts in gloo's teardown here (see tests/dist_cases.py)
"""

TORCHRUN_TEST_FILE = """
import sys
from pathlib import Path

import pytest

from tinykit.distributed import run_torchrun

SCRIPT = str(Path(__file__).with_name("test_bench_nodes.py"))


@pytest.mark.parametrize("i", range({n}))
def test_fresh_torchrun(i):
    job = run_torchrun([sys.executable, SCRIPT, str(i)], nodes=2, nproc_per_node=2, echo=False)
    assert job.returncode == 0
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


def ranks_part(tmp: Path, n: int) -> None:
    test_file = tmp / "test_bench_dist.py"
    test_file.write_text(TEST_FILE.replace("{n}", str(n)))
    warm_wall, warm_times = run_session(test_file)
    fresh_wall, fresh_times = run_session(test_file, "--tinykit-dist-fresh")
    assert len(warm_times) == len(fresh_times) == n, (len(warm_times), len(fresh_times))
    warm, fresh = sum(warm_times) / n, sum(fresh_times) / n
    print(
        f"{n} two-rank CPU tests (gloo, DDP step of a tiny model), cores={os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    _table(
        [
            ("warm pool (tinykit)", warm_times, warm_wall),
            ("fresh spawn (baseline)", fresh_times, fresh_wall),
        ]
    )
    print(
        f"speed-up per test: {fresh / warm:.1f}x (goal >= 3x); warm per test {warm:.3f} s "
        f"including pool start-up (goal <= 1 s); session speed-up {fresh_wall / warm_wall:.1f}x"
    )


def nodes_part(tmp: Path, n_warm: int, n_torchrun: int) -> None:
    warm_file = tmp / "test_bench_nodes.py"
    warm_file.write_text(NODES_TEST_FILE.replace("{n}", str(n_warm)))
    torchrun_file = tmp / "test_bench_torchrun.py"
    torchrun_file.write_text(TORCHRUN_TEST_FILE.replace("{n}", str(n_torchrun)))
    warm_wall, warm_times = run_session(warm_file)
    fresh_wall, fresh_times = run_session(torchrun_file)
    assert (len(warm_times), len(fresh_times)) == (n_warm, n_torchrun)
    warm, fresh = sum(warm_times) / n_warm, sum(fresh_times) / n_torchrun
    print(
        f"2 emulated nodes × 2 ranks (gloo, DDP step): {n_warm} warm tests vs {n_torchrun} with a "
        f"fresh torchrun each, cores={os.cpu_count()}, load average {os.getloadavg()[0]:.1f}"
    )
    _table(
        [
            ("warm 2x2 pool (tinykit)", warm_times, warm_wall),
            ("fresh torchrun (baseline)", fresh_times, fresh_wall),
        ]
    )
    print(
        f"speed-up per test: {fresh / warm:.1f}x; warm 2x2 per test {warm:.3f} s including the "
        f"pool's start-up (goal <= 1 s); median warm {statistics.median(warm_times):.3f} s vs "
        f"median torchrun {statistics.median(fresh_times):.2f} s"
    )


def _table(rows: list[tuple[str, list[float], float]]) -> None:
    print(
        f"{'mode':<27}{'per test (s)':>13}{'first (s)':>11}{'median (s)':>12}"
        f"{'all tests (s)':>15}{'session wall (s)':>18}"
    )
    for label, times, wall in rows:
        print(
            f"{label:<27}{sum(times) / len(times):>13.3f}{times[0]:>11.2f}"
            f"{statistics.median(times):>12.3f}{sum(times):>15.2f}{wall:>18.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=20, help="two-rank tests per mode (20)")
    parser.add_argument("--node-tests", type=int, default=20, help="warm 2x2 tests (20)")
    parser.add_argument("--torchrun-tests", type=int, default=3, help="fresh torchrun tests (3)")
    parser.add_argument("--only", choices=["ranks", "nodes"], help="run one part")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tinykit-bench-") as tmp:
        if args.only != "nodes":
            ranks_part(Path(tmp), args.tests)
        if args.only != "ranks":
            nodes_part(Path(tmp), args.node_tests, args.torchrun_tests)


if __name__ == "__main__":
    main()
