"""What memory measurement costs, and what the sampling interval catches.

    python benchmarks/memory.py                     # overheads and the spike table (minutes)
    python benchmarks/memory.py --projection        # + projections vs measured full depth
    python benchmarks/memory.py --only projection   # one section (marker, tracking, spike,
                                                    # projection: ~25 min, 12 GB free)

1. The `tinykit_limit_memory` marker (and `--tinykit-memory`) on a ~1-second test, against the
   same test unmarked: the call phase's wall and CPU time (an outermost conftest wrapper),
   after a warm-up test, five sessions each, interleaved.
2. `track_memory` around a training step of a real-width 2-layer OPT, against no tracking, at
   the default interval (50 ms), at 20 and 5 ms, and with top=5 (tracemalloc: what a failing budget's traced
   rerun costs); and on a tiny 2-layer Llama (10 steps), where Python overhead dominates.
3. A 100 ms spike of 200 MB: the peak the sampler alone catches at each interval
   (exact_peak=False), beside the kernel's exact peak (the default).
4. With --projection: `project_memory` from 1-2 layers against the measured full depth, bf16,
   batch 1: facebook/opt-125m (inference and an AdamW step, seq 128) and
   ibm-granite/granite-3.1-1b-a400m-instruct (MoE, 1.33B; inference at seq 128, an AdamW step
   at seq 32: weights, gradients and two states are 10.7 GB, so it needs ~12 GB free).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

HUB_FILES = (
    Path(os.environ.get("TINYKIT_SHARED", Path(__file__).parents[2] / "shared")) / "hub-files"
)
MB = 10**6

ONE_SECOND_TEST = """
import pytest, torch

torch.set_num_threads(1)  # OpenMP threads spinning on a shared box swing CPU time

def work():
    x = torch.randn(256, 256)
    rows = []
    for i in range(ROUNDS):
        x = torch.tanh(x @ x / 256)
        rows.append([j * 2 for j in range(200)])   # Python allocations too
        if len(rows) > 50:
            rows.clear()
    return float(x.sum())

MARK
def test_a_warm_up():  # a session's first measured test also pays the one-time imports
    pass

MARK
def test_one_second():
    work()
"""


def _calibrate_rounds() -> int:
    import torch

    torch.set_num_threads(1)

    x = torch.randn(256, 256)
    t0 = time.perf_counter()
    for _ in range(200):
        x = torch.tanh(x @ x / 256)
        _ = [j * 2 for j in range(200)]
    return int(200 / (time.perf_counter() - t0))


# Outermost wrapper of the call phase (tinykit's own wrapper runs inside it): wall and CPU
# seconds (CPU: every thread of the process, so the sampler's work counts) of the 1 s test, after
# a warm-up test (in a real session the tracker's imports are paid once, not per test).
TIMING_CONFTEST = """
import os, time, pytest

@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        return (yield)
    finally:
        if item.name == "test_one_second":
            with open(os.environ["BENCH_OUT"], "w") as f:
                f.write(f"{time.perf_counter() - wall} {time.process_time() - cpu}")
"""


def marker_overhead() -> None:
    rounds = _calibrate_rounds()
    times: dict[str, list[tuple[float, float]]] = {}
    budget = "@pytest.mark.tinykit_limit_memory(host='1 GB')"
    marks = {  # name -> (marker line, extra pytest options)
        "no marker": ("", []),
        "tinykit_limit_memory(host='1 GB')": (budget, []),
        "--tinykit-memory (no marker)": ("", ["--tinykit-memory"]),
    }
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "conftest.py").write_text(TIMING_CONFTEST)
        out = Path(tmp) / "timing.txt"
        for _ in range(5):  # interleaved: load on a shared machine drifts
            for name, (mark, options) in marks.items():
                test = Path(tmp) / "test_bench.py"
                test.write_text(
                    ONE_SECOND_TEST.replace("ROUNDS", str(rounds)).replace("MARK", mark)
                )
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pytest",
                        "-q",
                        "-p",
                        "no:randomly",
                        str(test),
                        "-p",
                        "no:cacheprovider",
                        *options,
                    ],
                    cwd=tmp,
                    check=True,
                    capture_output=True,
                    env={**os.environ, "BENCH_OUT": str(out)},
                )
                wall, cpu = map(float, out.read_text().split())
                times.setdefault(name, []).append((wall, cpu))
    base_wall = statistics.median(w for w, _ in times["no marker"])
    base_cpu = statistics.median(c for _, c in times["no marker"])
    print("1. budget marker on a ~1 s test: call phase, median of 5 sessions (wall | CPU)")
    for name, ts in times.items():
        wall = statistics.median(w for w, _ in ts)
        cpu = statistics.median(c for _, c in ts)
        print(
            f"   {name:<40} {wall:6.3f} s {wall / base_wall - 1:+6.1%} | "
            f"{cpu:6.3f} s {cpu / base_cpu - 1:+6.1%}"
        )


def _compare(title: str, step: Callable[[], None], rounds: int) -> None:
    """Median wall and CPU time of `step` under each tracker, interleaved (load drifts); CPU
    time counts every thread, so the sampler's own work is in it."""
    from tinykit.memory.track import track_memory

    variants: dict[str, Callable[[], Any]] = {
        "no tracking": contextlib.nullcontext,
        "track_memory() (default: 50 ms)": track_memory,
        "track_memory(interval=0.02)": lambda: track_memory(interval=0.02),
        "track_memory(interval=0.005)": lambda: track_memory(interval=0.005),
        "track_memory(top=5) (tracemalloc)": lambda: track_memory(top=5),
    }
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, tracker in variants.items():
            wall, cpu = time.perf_counter(), time.process_time()
            with tracker() as m:
                step()
            sampler = m.sampler_cpu_s if m is not None else 0.0
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu, sampler))
    print(f"{title}, median of {rounds} (wall | CPU | the sampler thread's own CPU)")
    base = [statistics.median(t[i] for t in times["no tracking"]) for i in (0, 1)]
    for name, ts in times.items():
        wall, cpu, own = (statistics.median(t[i] for t in ts) for i in (0, 1, 2))
        print(
            f"   {name:<36} {wall * 1000:8.1f} ms {wall / base[0] - 1:+6.1%} | "
            f"{cpu * 1000:8.1f} ms {cpu / base[1] - 1:+6.1%} | {own * 1000:6.1f} ms "
            f"{own / base[1]:5.1%}"
        )


def training_step_overhead() -> None:
    import torch
    import transformers

    def trainer(model: Any, vocab: int, shape: tuple[int, int], steps: int) -> Callable[[], None]:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(0, vocab, shape)

        def step() -> None:
            for _ in range(steps):
                model(input_ids=ids, labels=ids).loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

        for _ in range(2):
            step()  # warm: optimizer state exists, kernels are chosen
        return step

    # One intra-op thread: on a shared box, OpenMP threads spinning at barriers swing CPU time
    # by more than the overhead measured.
    torch.set_num_threads(1)
    torch.manual_seed(0)
    opt_config = transformers.OPTConfig(
        hidden_size=768,
        ffn_dim=3072,
        num_attention_heads=12,
        num_hidden_layers=2,
        vocab_size=50272,
        max_position_embeddings=512,
    )
    opt_step = trainer(transformers.OPTForCausalLM(opt_config), 50272, (2, 128), 1)
    _compare("2a. training step of a real-width 2-layer OPT (batch 2 x 128)", opt_step, 5)
    llama_config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=1000,
    )
    tiny_step = trainer(transformers.LlamaForCausalLM(llama_config), 1000, (2, 32), 10)
    _compare("2b. 10 training steps of a tiny 2-layer Llama (batch 2 x 32)", tiny_step, 7)


def _spike() -> None:
    block = b"\x01" * (200 * MB)
    time.sleep(0.1)
    del block


def spike_table() -> None:
    from tinykit.memory.track import settle, track_memory

    print("3. a 100 ms spike of 200 MB: peak rise caught (min / median of 5)")
    rows = [
        (f"sampler alone, every {ms:g} ms", ms / 1000, False) for ms in (1, 5, 20, 50, 100, 200)
    ]
    rows.append(("kernel peak (default), sampler every 50 ms", 0.05, True))
    for name, interval, exact in rows:
        caught = []
        for _ in range(5):
            settle()
            with track_memory(interval=interval, exact_peak=exact) as m:
                _spike()
            caught.append(m.host_peak_delta)
        print(
            f"   {name:<44} {min(caught) / MB:6.1f} MB / {statistics.median(caught) / MB:6.1f} MB"
        )


def projections() -> None:
    from tinykit.memory.project import project_memory
    from tinykit.memory.sizes import format_bytes

    print("4. projection from 1-2 layers vs the measured full depth (host peak, CPU, bf16)")
    granite = "ibm-granite/granite-3.1-1b-a400m-instruct"
    cases = [  # (repo, seq, train, free memory the full depth needs)
        ("facebook/opt-125m", 128, False, 1e9),
        ("facebook/opt-125m", 128, True, 2e9),
        (granite, 128, False, 4e9),
        (granite, 32, True, 12.5e9),  # weights, gradients, 2 AdamW states: 10.7 GB
    ]
    rows = []
    for repo, seq, train, needs in cases:
        what = f"{'AdamW step' if train else 'inference'}, seq {seq}"
        available = psutil.virtual_memory().available
        if available < needs:
            print(
                f"   {repo} {what}: skipped, needs ~{format_bytes(int(needs))} free, "
                f"{format_bytes(available)} available"
            )
            continue
        p = project_memory(str(HUB_FILES / repo), seq=seq, dtype="bfloat16", train=train, full=True)
        print(p.summary())
        assert p.full is not None
        rows.append((f"{repo} {what}", p.projected, p.full["peak"], p.error))
    print("   summary: projected vs measured full-depth peak")
    for name, projected, measured, error in rows:
        print(
            f"   {name:<62} {format_bytes(projected):>9} vs {format_bytes(measured):>9} "
            f"({error:+.1%})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projection", action="store_true", help="also run the projections")
    sections = {
        "marker": marker_overhead,
        "tracking": training_step_overhead,
        "spike": spike_table,
        "projection": projections,
    }
    parser.add_argument(
        "--only", action="append", choices=sections, help="run only these sections (repeatable)"
    )
    args = parser.parse_args()
    chosen = args.only or [*list(sections)[:3], *(["projection"] if args.projection else [])]
    for name in chosen:
        sections[name]()


if __name__ == "__main__":
    main()
