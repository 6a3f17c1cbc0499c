"""The memory markers, fixture and report, run as real pytest sessions (pytester subprocesses)."""

from __future__ import annotations

import re

BUDGETS = """
import pytest

@pytest.mark.tinykit_limit_memory(host="50 MB")
def test_over_budget():
    block = b"\\x01" * 100_000_000   # 100 MB, every page written
    assert sum(block[::1_000_000]) == 100

@pytest.mark.tinykit_limit_memory(host="50 MB")
def test_within_budget():
    block = b"\\x01" * 10_000_000
    del block

def test_fixture(limit_memory):
    with limit_memory(host="20 MB") as m:
        block = b"\\x01" * 60_000_000
        assert sum(block[::1_000_000]) == 60
"""


def test_budgets_fail_naming_the_peak_budget_and_top_allocation(pytester):
    pytester.makepyfile(test_budgets=BUDGETS)
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    over = re.search(r"host memory peaked at \+([\d.]+) MB, over the budget of 50\.0 MB", out)
    assert over, out
    assert 95 <= float(over.group(1)) <= 115  # ~100 MB named, not the process's whole RSS
    assert re.search(r"top allocations: \S*test_budgets.py:5: 100\.0 MB", out), out
    fixture = re.search(r"host memory peaked at \+([\d.]+) MB, over the budget of 20\.0 MB", out)
    assert fixture and 55 <= float(fixture.group(1)) <= 75, out


LEAKS = """
import pytest

KEPT = []

@pytest.mark.tinykit_limit_leaks("1 MB", warmup=2, iterations=5)
def test_leaks_a_megabyte_per_call():
    KEPT.append(b"\\x01" * 1_000_000)

@pytest.mark.tinykit_limit_leaks("1 MB", warmup=2, iterations=5)
def test_no_leak():
    scratch = [b"\\x01" * 100_000 for _ in range(50)]   # 5 MB, freed on return
    assert len(scratch) == 50
"""


def test_limit_leaks_catches_a_leak_and_passes_20_leak_free_runs(pytester):
    pytester.makepyfile(test_leaks=LEAKS)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-k", "leaks_a_megabyte")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    grew = re.search(r"a leak: host memory grew by ([\d.]+) MB over 5 calls", out)
    assert grew and 4.5 <= float(grew.group(1)) <= 6.5, out
    assert re.search(r"lines that grew: \S*test_leaks.py:7: 5\.0 MB", out), out
    # 20 runs of the leak-free body in one session: pytest's own --count is not installed,
    # so the module parametrizes the test 20 times
    pytester.makepyfile(
        test_clean=LEAKS.replace(
            "def test_no_leak():",
            "@pytest.mark.parametrize('run', range(20))\ndef test_no_leak(run):",
        )
    )
    clean = pytester.runpytest_subprocess("-p", "no:randomly", "test_clean.py", "-k", "no_leak")
    clean.assert_outcomes(passed=20)


XDIST = """
import time

def test_big():
    block = b"\\x01" * 300_000_000
    time.sleep(0.3)
    del block

def test_small():
    block = b"\\x01" * 10_000_000
    time.sleep(0.3)
    del block
"""


def _figure(out: str, name: str) -> float:
    row = re.search(rf"host \+([\d.]+) (MB|KB|B) \(peak [^)]*\)\s+\S*::{name}\b", out)
    assert row, out
    return float(row.group(1)) / {"MB": 1, "KB": 1e3, "B": 1e6}[row.group(2)]


def test_under_xdist_each_test_gets_its_own_figure(pytester):
    pytester.makepyfile(test_sizes=XDIST)
    result = pytester.runpytest_subprocess("-n", "2", "--tinykit-memory", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "tinykit memory: 2 highest host peaks" in out
    assert 290 <= _figure(out, "test_big") <= 330, out
    assert 8 <= _figure(out, "test_small") <= 20, out


DIST = """
import pytest

@pytest.mark.tinykit_limit_memory(host="150 MB")
@pytest.mark.tinykit_dist(world_size=2)
def test_rank_one_allocates(dist_env):
    size = 200_000_000 if dist_env.rank == 1 else 1_000_000
    block = b"\\x01" * size
    del block
"""


def test_dist_tests_report_and_budget_each_rank(pytester):
    pytester.makepyfile(test_ranks=DIST)
    result = pytester.runpytest_subprocess("--tinykit-memory", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert re.search(r"rank 1: host memory peaked at \+(19\d|20\d|21\d)\.\d MB", out), out
    ranks = re.search(r"ranks: 0: \+([\d.]+) (MB|KB), 1: \+([\d.]+) MB", out)
    assert ranks and float(ranks.group(3)) >= 190, out
