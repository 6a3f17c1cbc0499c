"""tinykit.memory: track_memory, check_leaks, history off CUDA, projection plans, `tinykit mem`."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import HUB_FILES
from hypothesis import given
from hypothesis import strategies as st

import tinykit
from tinykit.errors import UsageError
from tinykit.memory.history import dump_snapshot, memory_history, rank_path
from tinykit.memory.leaks import MemoryLeakDetected, check_leaks
from tinykit.memory.project import fit, measure_step, plan_projection
from tinykit.memory.sizes import format_bytes, parse_size
from tinykit.memory.track import MemoryBudgetExceeded, MemoryReport, track_memory

MB = 10**6


def in_a_fresh_process(test):
    """Run `test` alone in a new interpreter. A long-lived one (an xdist worker that has loaded
    torch and run hundreds of tests) serves new blocks from heap memory it already holds, so
    its RSS does not rise by what a block allocates: exact deltas need a fresh heap."""

    @functools.wraps(test)
    def run_fresh():
        if os.environ.get("TINYKIT_TEST_FRESH") == test.__name__:
            return test()
        node = f"{__file__}::{test.__name__}"
        flags = ["-p", "no:randomly", "-p", "no:xdist", "-p", "no:cacheprovider", "-q"]
        env = {**os.environ, "TINYKIT_TEST_FRESH": test.__name__}
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *flags, node], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]

    return run_fresh


@given(st.integers(0, 10**13), st.sampled_from(["B", "KB", "MB", "GB", "KiB", "MiB", "GiB"]))
def test_sizes_parse_what_they_print_and_every_unit(n, unit):
    scale = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024, "MiB": 2**20, "GiB": 2**30}
    assert parse_size(f"{n} {unit}") == int(n * scale[unit])
    shown = format_bytes(n)
    assert abs(parse_size(shown) - n) <= max(0.051 * n, 1)  # one decimal of the shown unit


@pytest.mark.parametrize("bad", ["", "12 parsecs", "MB", "-3 MB", True])
def test_bad_sizes_are_usage_errors(bad):
    with pytest.raises(UsageError, match="size"):
        parse_size(bad)


@in_a_fresh_process
def test_track_memory_sees_a_100_mb_block_and_says_no_accelerator():
    with tinykit.track_memory(top=3) as m:
        block = b"\x01" * (100 * MB)
        assert sum(block[:: 10 * MB]) == 10
        time.sleep(0.5)  # top allocations are what the sampler saw alive: let it look once
        del block
    assert 95 * MB <= m.host_peak_delta <= 115 * MB, m.summary()
    assert abs(m.host_delta) < 20 * MB  # freed before the block ended
    assert m.devices == {} and m.device_note == "no accelerator in use"
    assert m.top and m.top[0].where.endswith(f"test_memory.py:{_line_of('block = b')}")
    again = MemoryReport.from_dict(json.loads(json.dumps(m.to_dict())))
    assert again.host_peak == m.host_peak and again.top[0].where == m.top[0].where


def _line_of(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@in_a_fresh_process
def test_nested_blocks_keep_their_own_peaks():
    with track_memory() as outer:
        first = b"\x01" * (80 * MB)
        assert sum(first[:: 10 * MB]) == 8
        del first
        with track_memory() as inner:  # resets the kernel counter: outer must keep its 80 MB
            small = b"\x01" * (10 * MB)
            del small
    assert 75 * MB <= outer.host_peak_delta <= 100 * MB, outer.summary()
    assert inner.host_peak_delta <= 25 * MB, inner.summary()


@in_a_fresh_process
def test_a_budget_fails_as_a_check_naming_used_and_budget_and_a_decorator_works():
    tracker = track_memory(host="30 MB")

    @tracker
    def allocate(n):
        block = b"\x01" * n
        return sum(block[::MB])

    assert allocate(5 * MB) == 5 and tracker.report.host_peak_delta < 30 * MB
    with pytest.raises(
        MemoryBudgetExceeded, match=r"peaked at \+\d+\.\d MB, over the budget of 30\.0 MB"
    ) as e:
        allocate(60 * MB)
    assert e.value.kind == "host" and e.value.budget == 30 * MB and e.value.used > 55 * MB


_KEPT: list = []


def _leaky_step():
    _KEPT.append(torch.ones(250_000))  # 1 MB of native memory tracemalloc never sees


def _clean_step():
    x = torch.randn(500, 500)
    return float((x @ x).sum())


def test_check_leaks_catches_a_native_leak_by_rss_and_passes_a_clean_step():
    with pytest.raises(MemoryLeakDetected, match=r"host memory grew by [4-6]\.\d MB over 5 calls"):
        check_leaks(_leaky_step, "1 MB", warmup=1, iterations=5)
    _KEPT.clear()
    report = check_leaks(_clean_step, "1 MB", warmup=2, iterations=5)
    assert not report.leaked and len(report.rss) == 6
    with pytest.raises(UsageError, match="iterations >= 2"):
        check_leaks(_clean_step, iterations=1)


def test_history_and_snapshots_are_a_no_op_saying_why_without_cuda(tmp_path, caplog):
    caplog.set_level("INFO", logger="tinykit._progress")
    with memory_history() as h:
        assert not h.active
        assert h.dump(tmp_path / "mem-{rank}.pickle") is None
    assert "no CUDA device" in h.reason
    assert dump_snapshot(tmp_path / "x-{rank}.pickle") is None
    assert "no memory snapshot written: no CUDA device" in caplog.text
    assert not list(tmp_path.iterdir())


def test_snapshot_paths_hold_the_rank(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert str(rank_path("out/mem-{rank}.pickle")) == "out/mem-3.pickle"
    with pytest.raises(UsageError, match="has no \\{rank\\} while 4 ranks run"):
        rank_path("mem.pickle")


@pytest.mark.parametrize(
    ("repo", "types"),
    [
        ("facebook/opt-125m", {"layer": 12}),
        ("Qwen/Qwen3-Next-80B-A3B-Instruct", {"linear_attention": 36, "full_attention": 12}),
        ("google/gemma-3-4b-it", {"sliding_attention": 29, "full_attention": 5}),
        ("deepseek-ai/DeepSeek-R1", {"like layer 0": 3, "like layer 3": 58}),
    ],
)
def test_projection_plans_cover_every_block_type_with_a_solvable_system(repo, types):
    raw = json.loads((HUB_FILES / repo / "config.json").read_text())
    plan = plan_projection(raw, (1, 2))
    assert plan.types == types
    assert set(plan.configs) == {"base", *(f"+{t}" for t in types)}
    assert all(n >= 1 for n in plan.counts["base"].values())  # every type is in every build
    # each variant adds layers of its own type (a period field may force others along)
    for t in types:
        assert plan.counts[f"+{t}"][t] > plan.counts["base"][t]
    rows = [[1, *(c[t] for t in types)] for c in plan.counts.values()]
    assert abs(float(torch.linalg.det(torch.tensor(rows, dtype=torch.float64)))) > 0.5


def test_a_projection_step_builds_the_class_make_tiny_would_and_measures_it():
    raw = json.loads((HUB_FILES / "facebook/opt-125m" / "config.json").read_text())
    raw.update(num_hidden_layers=1, hidden_size=32, ffn_dim=64, word_embed_proj_dim=32)
    raw.update(num_attention_heads=4, vocab_size=128)
    got = measure_step(raw, seq=8, batch=1, dtype="float32", train=False, optimizer="adamw")
    from transformers import OPTConfig, OPTForCausalLM

    assert got["params"] == OPTForCausalLM(OPTConfig(**raw)).num_parameters()
    assert got["where"] == "host" and got["peak"] >= 0


@given(
    st.integers(10**6, 10**9),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 10**8), min_size=1),
    st.data(),
)
def test_the_fit_recovers_fixed_and_per_layer_costs_of_linear_peaks(fixed, costs, data):
    types = sorted(costs)
    base = {t: data.draw(st.integers(1, 3)) for t in types}
    configs = {"base": base}
    for t in types:  # a variant adds layers of its type and maybe (period fields) others
        configs[f"+{t}"] = {
            u: base[u] + (data.draw(st.integers(1, 2)) if u == t else 0) for u in types
        }
    measured = {
        k: {"layers": c, "peak": fixed + sum(costs[t] * c[t] for t in types)}
        for k, c in configs.items()
    }
    got_fixed, got_costs = fit(measured, "peak")
    assert got_fixed == pytest.approx(fixed, rel=1e-6, abs=1)
    assert got_costs == pytest.approx({t: costs[t] for t in types}, rel=1e-6, abs=1)


def _tinykit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tinykit", *args], capture_output=True, text=True, timeout=timeout
    )


GRANDCHILD = (
    "import subprocess, sys; "
    "subprocess.run([sys.executable, '-c', "
    "'import time; b = bytes(500_000_000); b = b\"\\\\x01\" * 500_000_000; time.sleep(0.2)'], check=True); "
    "sys.exit(3)"
)


def test_mem_run_counts_a_grandchild_and_passes_the_exit_code_through(tmp_path):
    plot = tmp_path / "mem.png"
    r = _tinykit(
        "mem", "run", "--json", "--plot", str(plot), "--", sys.executable, "-c", GRANDCHILD
    )
    assert r.returncode == 3, r.stderr
    result = json.loads(r.stdout)
    assert result["peak"] >= 500 * MB, result
    assert result["peak"] < 1200 * MB  # the grandchild, not the sum of every process ever
    assert result["returncode"] == 3 and result["command"][0] == sys.executable
    assert "tinykit: mem run: peak " in r.stderr
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["mem", "run"], 2, "no command to measure"),
        (["mem", "run", "--", "no-such-command-x"], 2, "was not found on PATH"),
        (["mem", "run", "--plot", "out.svg", "--", "true"], 2, "name the file *.png"),
        (["mem", "project", "opt", "--layers", "2,1"], 2, "use 1 <= LO < HI"),
        (["mem", "project", "opt", "--sq", "5"], 2, "Did you mean '--seq'?"),
    ],
)
def test_mem_usage_errors_are_one_line(args, code, message):
    r = _tinykit(*args)
    assert r.returncode == code, r.stderr
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
