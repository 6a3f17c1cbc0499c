"""The memory markers, fixture and report, run as real pytest sessions (pytester subprocesses)."""

from __future__ import annotations

import re

BUDGETS = """
import pytest

@pytest.mark.tinykit_limit_memory(host="50 MB")
def test_over_budget():
    block = b"\\x01" * 100_000_000   # 100 MB, every page written
    assert sum(block[::1_000_000]) == 100
    __import__("time").sleep(0.5)  # alive long enough for the sampler to name its line

@pytest.mark.tinykit_limit_memory(host="50 MB")
def test_within_budget():
    block = b"\\x01" * 10_000_000
    del block

RUNS = []

@pytest.mark.tinykit_limit_memory(host="30 MB")
def test_over_budget_once_only():
    RUNS.append(1)
    assert len(RUNS) == 1, "the rerun sees the first run's state"
    block = b"\\x01" * 40_000_000
    assert sum(block[::1_000_000]) == 40

def test_fixture(limit_memory):
    with limit_memory(host="20 MB") as m:
        block = b"\\x01" * 60_000_000
        assert sum(block[::1_000_000]) == 60
"""


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


CLEAN = LEAKS.replace(
    "def test_no_leak():", "@pytest.mark.parametrize('run', range(20))\ndef test_no_leak(run):"
)


def test_budgets_and_leak_checks_in_one_session(pytester):
    """One session (a pytest start is seconds): budgets, a leak, and 20 leak-free runs in a row."""
    pytester.makepyfile(test_budgets=BUDGETS, test_leaks=CLEAN)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:xdist")
    result.assert_outcomes(passed=1 + 20, failed=4)
    out = result.stdout.str()
    over = re.search(r"host memory peaked at \+([\d.]+) MB, over the budget of 50\.0 MB", out)
    assert over, out
    assert 95 <= float(over.group(1)) <= 115  # ~100 MB named, not the process's whole RSS
    # named by a traced rerun of the failing test (passing tests run without tracemalloc)
    rerun = r"top allocations \(from a traced rerun, which peaked at \+1\d\d\.\d MB\): "
    assert re.search(rerun + r"\S*test_budgets.py:5: 100\.0 MB", out), out
    # a rerun that fails on the first run's state says so instead of naming lines
    assert (
        "top allocations (not named: the traced rerun raised AssertionError: the rerun sees the "
        "first run's state): none" in out
    ), out
    fixture = re.search(r"host memory peaked at \+([\d.]+) MB, over the budget of 20\.0 MB", out)
    assert fixture and 55 <= float(fixture.group(1)) <= 75, out
    grew = re.search(r"a leak: host memory grew by ([\d.]+) MB over 5 calls", out)
    assert grew and 4.5 <= float(grew.group(1)) <= 6.5, out
    assert re.search(r"lines that grew: \S*test_leaks.py:7: 5\.0 MB", out), out
    assert "FAILED test_budgets.py::test_within_budget" not in out
    assert "FAILED test_leaks.py::test_no_leak" not in out


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


DIST = """
import pytest

@pytest.mark.tinykit_limit_memory(host="150 MB")
@pytest.mark.tinykit_dist(world_size=2)
def test_rank_one_allocates(dist_env):
    size = 200_000_000 if dist_env.rank == 1 else 1_000_000
    block = b"\\x01" * size
    assert sum(block[:: 1_000_000]) == size // 1_000_000

@pytest.mark.tinykit_dist(world_size=2)
def test_limit_memory_inside_the_ranks(dist_env, limit_memory):
    size = 120_000_000 if dist_env.rank == 0 else 1_000_000
    with limit_memory(host="60 MB", top=0):
        block = b"\x01" * size
        assert sum(block[:: 1_000_000]) == size // 1_000_000
"""


def _figure(out: str, name: str) -> float:
    row = re.search(rf"host \+([\d.]+) (MB|KB|B) \(peak [^)]*\).*\s\S*::{name}\b", out)
    assert row, out
    return float(row.group(1)) / {"MB": 1, "KB": 1e3, "B": 1e6}[row.group(2)]


def test_under_xdist_each_test_and_each_rank_gets_its_own_figure(pytester):
    pytester.makepyfile(test_sizes=XDIST, test_ranks=DIST)
    result = pytester.runpytest_subprocess("-n", "2", "--tinykit-memory", "-p", "no:randomly")
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    assert "tinykit memory: 3 highest host peaks" in out
    assert 290 <= _figure(out, "test_big") <= 330, out
    assert 8 <= _figure(out, "test_small") <= 20, out
    # the distributed test: rank 1's 200 MB fails the 150 MB budget, rank 0 stays small
    assert re.search(r"rank 1: host memory peaked at \+(19\d|20\d|21\d)\.\d MB", out), out
    assert 190 <= _figure(out, "test_rank_one_allocates") <= 220, out  # its largest rank
    ranks = re.search(r"ranks: 0: \+([\d.]+) (MB|KB), 1: \+([\d.]+) MB", out)
    assert ranks and float(ranks.group(3)) >= 190, out
    # the fixture inside the ranks: rank 0's block fails its own budget, named by rank
    assert re.search(
        r"rank 0 raised MemoryBudgetExceeded: host memory peaked at \+1[12]\d\.\d MB, over the "
        r"budget of 60\.0 MB",
        out,
    ), out


WARMUP = """
import pytest, torch

PATH = {path!r}

def build():
    import transformers   # its modeling code loads the first time a test of the worker builds one
    return transformers.AutoModelForCausalLM.from_pretrained(PATH)

def test_a_builds_first():
    build()

@pytest.mark.tinykit_limit_memory(host="60 MB")
def test_budgeted():
    model = build()
    ids = torch.arange(16).reshape(2, 8) % 50 + 3
    model(input_ids=ids, labels=ids).loss.backward()
"""


def _imports(out: str, name: str) -> float:
    row = re.search(rf"first-time imports \+([\d.]+) (MB|KB)\s+\S*::{name}\b", out)
    return 0.0 if row is None else float(row.group(1)) / (1 if row.group(2) == "MB" else 1e3)


def test_a_budget_gives_the_same_verdict_whatever_ran_before_it(pytester):
    """A 0.4 MB model's test: alone, it imports transformers' modeling code (well over its 60 MB
    budget); after a test that built a model, it does not. Both pass: the warm-up is reported
    apart and left out."""
    import tinykit

    pytester.makepyfile(test_warmup=WARMUP.format(path=str(tinykit.fixture_path("tiny-llama"))))
    flags = ["-p", "no:randomly", "-p", "no:xdist", "--tinykit-memory"]
    alone = pytester.runpytest_subprocess(*flags, "-k", "budgeted")
    alone.assert_outcomes(passed=1)
    after = pytester.runpytest_subprocess(*flags)
    after.assert_outcomes(passed=2)
    first, second = alone.stdout.str(), after.stdout.str()
    assert _figure(first, "test_budgeted") > 60 and _imports(first, "test_budgeted") > 60, first
    assert _imports(second, "test_budgeted") < 5, second
    own_alone = _figure(first, "test_budgeted") - _imports(first, "test_budgeted")
    assert own_alone < 60 and abs(own_alone - _figure(second, "test_budgeted")) < 30, (
        first,
        second,
    )
