"""Per-test seeding, the seed in the header, --tinykit-seed, xdist (inner runs in subprocesses)."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import zlib

import pytest
import torch

PRINTS_RANDOM = """
import random
def test_a(): print("value", random.random())
def test_b(): print("value", random.random())
"""


def values(result: pytest.RunResult) -> list[float]:
    """What the inner tests printed after 'value' (-s output shares lines with progress dots)."""
    found = re.findall(r"value ([0-9.e-]+?)(?=\.?$|\.?value )", result.stdout.str(), flags=re.M)
    return [float(v) for v in found]


def expected(session_seed: int, nodeid: str) -> float:
    """The first random.random() of a test: the plugin seeds it with seed + crc32(nodeid)."""
    return random.Random((session_seed + zlib.crc32(nodeid.encode())) % 2**32).random()


def test_seed_is_printed_and_reproduces_each_test(pytester: pytest.Pytester, monkeypatch):
    path = pytester.makepyfile(PRINTS_RANDOM)
    first = pytester.runpytest_subprocess("--tinykit-seed=7", "-s")
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(["tinykit: seed=7 (reuse: --tinykit-seed=7 or --tinykit-seed=last)"])
    assert values(first) == [expected(7, f"{path.name}::{t}") for t in ("test_a", "test_b")]
    assert values(pytester.runpytest_subprocess("--tinykit-seed=last", "-s")) == values(first)
    assert values(pytester.runpytest_subprocess("--tinykit-seed=8", "-s")) != values(first)
    # a test's seed does not depend on which other tests run; TINYKIT_SEED sets the seed too
    monkeypatch.setenv("TINYKIT_SEED", "7")
    only_b = pytester.runpytest_subprocess("-s", "-k", "test_b")
    only_b.stdout.fnmatch_lines(["tinykit: seed=7 *"])
    assert values(only_b) == values(first)[1:]


@pytest.mark.parametrize(
    ("value", "why"), [("banana", "is not an integer or 'last'"), ("-1", "is outside [[]0, 2**32)")]
)
def test_bad_seed_is_a_usage_error(pytester: pytest.Pytester, value, why):
    pytester.makepyfile(PRINTS_RANDOM)
    result = pytester.runpytest_subprocess(f"--tinykit-seed={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*argument --tinykit-seed: '{value}' {why}*"])


def test_last_without_a_previous_run_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makepyfile(PRINTS_RANDOM)
    result = pytester.runpytest_subprocess("--tinykit-seed=last")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tinykit-seed=last: no previous seed is recorded*"])


def header_seed(result: pytest.RunResult) -> int:
    return int(re.search(r"tinykit: seed=(\d+) ", result.stdout.str()).group(1))


def test_a_test_draws_the_same_numbers_alone_and_inside_the_suite(pytester: pytest.Pytester):
    path = pytester.makepyfile(PRINTS_RANDOM)
    pytester.makepyfile(test_other="def test_c(tinykit_seed): pass")  # the suite uses tinykit
    alone = pytester.runpytest_subprocess("-s", f"{path.name}::test_b")  # no tinykit fixture
    alone.assert_outcomes(passed=1)
    seed = header_seed(alone)
    assert values(alone) == [expected(seed, f"{path.name}::test_b")]
    suite = pytester.runpytest_subprocess("-s", f"--tinykit-seed={seed}")
    suite.assert_outcomes(passed=3)
    assert values(suite)[1] == values(alone)[0]


def test_seeding_is_off_with_the_ini_switch_or_without_the_plugin(pytester: pytest.Pytester):
    pytester.makepyfile(PRINTS_RANDOM)
    pytester.makeini("[pytest]\ntinykit_seed_tests = false\n")
    runs = [pytester.runpytest_subprocess("-s") for _ in range(2)]
    runs.append(pytester.runpytest_subprocess("-s", "-p", "no:tinykit"))
    for result in runs:
        result.assert_outcomes(passed=2)
        assert not [line for line in result.outlines if "tinykit:" in line or "seed=" in line]
    assert values(runs[0]) != values(runs[1])  # random stays random: nothing was seeded


def test_last_is_the_seed_a_test_last_ran_under(pytester: pytest.Pytester):
    pytester.makepyfile(PRINTS_RANDOM)
    first = pytester.runpytest_subprocess("-s", "--tinykit-seed=5")
    pytester.runpytest_subprocess("--tinykit-seed=9", "--collect-only")  # seeds no test
    pytester.runpytest_subprocess("--tinykit-seed=11", "-k", "no_such_test")
    last = pytester.runpytest_subprocess("-s", "--tinykit-seed=last")
    last.stdout.fnmatch_lines(["tinykit: seed=5 *"])
    assert values(last) == values(first)


def test_a_tinykit_fixture_turns_seeding_on_and_prints_the_seed(pytester: pytest.Pytester):
    path = pytester.makepyfile("""
        import random
        def test_a(tinykit_seed):
            print("value", tinykit_seed)
            print("value", random.random())
    """)
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(passed=1)
    seed = int(re.search(r"tinykit: seed=(\d+) ", result.stdout.str()).group(1))
    test_seed, first_random = values(result)
    assert test_seed == (seed + zlib.crc32(f"{path.name}::test_a".encode())) % 2**32
    assert first_random == expected(seed, f"{path.name}::test_a")


def test_a_failure_says_how_to_reproduce_it(pytester: pytest.Pytester):
    pytester.makepyfile("def test_fails(tinykit_seed): assert False")
    result = pytester.runpytest_subprocess("--tinykit-seed=42")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*- tinykit -*",
            "test seed * from session seed 42. Reproduce: "
            "pytest 'test_a_failure_says_how_to_reproduce_it.py::test_fails' --tinykit-seed=42",
        ]
    )


def test_xdist_workers_use_the_controller_seed(pytester: pytest.Pytester):
    path = pytester.makepyfile(PRINTS_RANDOM)
    pytester.makeconftest(  # report what each worker's test drew, through the controller
        "def pytest_runtest_logreport(report):\n"
        "    if report.when == 'call': print('value', report.capstdout.split()[-1])\n"
    )
    result = pytester.runpytest_subprocess("--tinykit-seed=5", "-n", "2")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["tinykit: seed=5 *"])
    assert sorted(values(result)) == sorted(
        [expected(5, f"{path.name}::test_a"), expected(5, f"{path.name}::test_b")]
    )


def test_xdist_without_explicit_seed_prints_it_in_the_header(pytester: pytest.Pytester):
    pytester.makepyfile("def test_a(tinykit_seed): pass")
    result = pytester.runpytest_subprocess("-n", "2")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["tinykit: seed=* (reuse: *"])


@pytest.fixture(scope="session")
def pytest_randomly(tmp_path_factory) -> str:
    """A folder holding pytest-randomly, for inner sessions only (it is not a tinykit dependency,
    and installed in the venv it would reorder every session's tests)."""
    target = tmp_path_factory.mktemp("pytest-randomly")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", target]
        + ["pytest-randomly"],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        pytest.skip(f"cannot install pytest-randomly: {done.stderr.strip()[-300:]}")
    return str(target)


DRAWS = """
import random
import torch
def test_a():
    print("value", random.random())
    print("value", torch.rand(1).item())
"""


def test_pytest_randomly_seed_is_the_one_seed(pytester, monkeypatch, pytest_randomly):
    path = pytester.makepyfile(DRAWS)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [pytest_randomly, os.environ.get("PYTHONPATH")]))
    )
    first = pytester.runpytest_subprocess("-s", "--randomly-seed=123")
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["Using --randomly-seed=123", "tinykit: seed=123 *"])
    test_seed = (123 + zlib.crc32(f"{path.name}::test_a".encode())) % 2**32
    drawn = torch.rand(1, generator=torch.Generator().manual_seed(test_seed)).item()
    assert values(first)[1] == pytest.approx(drawn)
    assert values(pytester.runpytest_subprocess("-s", "--randomly-seed=123")) == values(first)
    # --tinykit-seed is handed to pytest-randomly: still one seed for random, numpy and torch
    ours = pytester.runpytest_subprocess("-s", "--tinykit-seed=123")
    ours.stdout.fnmatch_lines(["Using --randomly-seed=123", "tinykit: seed=123 *"])
    assert values(ours) == values(first)
