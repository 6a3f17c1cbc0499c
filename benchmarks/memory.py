"""What memory measurement costs, and what the sampling interval catches.

    python benchmarks/memory.py                 # overheads and the spike table (~2 minutes)
    python benchmarks/memory.py --projection    # + projections vs measured full depth (long)

1. The `tinykit_limit_memory` marker on a ~1-second test, against the same test unmarked:
   the call phase's wall and CPU time (an outermost conftest wrapper), three sessions each.
2. `track_memory` around a training step of a real-width 2-layer OPT, against no tracking.
3. A 100 ms spike of 200 MB: the peak the sampler alone catches at each interval
   (exact_peak=False), beside the kernel's exact peak (the default).
4. With --projection: `project_memory` from 1-2 layers against the measured full depth:
   facebook/opt-125m (inference and an AdamW training step) and
   ibm-granite/granite-3.1-1b-a400m-instruct (MoE; inference: a bf16 AdamW step needs ~11 GB).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HUB_FILES = (
    Path(os.environ.get("TINYKIT_SHARED", Path(__file__).parents[2] / "shared")) / "hub-files"
)
MB = 10**6

ONE_SECOND_TEST = """
import pytest, torch

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
def test_one_second():
    work()
"""


def _calibrate_rounds() -> int:
    import torch

    x = torch.randn(256, 256)
    t0 = time.perf_counter()
    for _ in range(200):
        x = torch.tanh(x @ x / 256)
        _ = [j * 2 for j in range(200)]
    return int(200 / (time.perf_counter() - t0))


# Outermost wrapper of the call phase (tinykit's own wrapper runs inside it): wall and CPU
# seconds (CPU: every thread of the process, so the sampler's work counts) into a file.
TIMING_CONFTEST = """
import os, time, pytest

@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        return (yield)
    finally:
        with open(os.environ["BENCH_OUT"], "w") as f:
            f.write(f"{time.perf_counter() - wall} {time.process_time() - cpu}")
"""


def marker_overhead() -> None:
    rounds = _calibrate_rounds()
    times: dict[str, list[tuple[float, float]]] = {}
    marks = {
        "no marker": "",
        "tinykit_limit_memory(host='1 GB') (top=5: tracemalloc)": (
            "@pytest.mark.tinykit_limit_memory(host='1 GB')"
        ),
        "tinykit_limit_memory(host='1 GB', top=0)": (
            "@pytest.mark.tinykit_limit_memory(host='1 GB', top=0)"
        ),
    }
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "conftest.py").write_text(TIMING_CONFTEST)
        out = Path(tmp) / "timing.txt"
        for _ in range(3):  # interleaved: load on a shared machine drifts
            for name, mark in marks.items():
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
    print("1. budget marker on a ~1 s test: call phase, median of 3 sessions (wall | CPU)")
    for name, ts in times.items():
        wall = statistics.median(w for w, _ in ts)
        cpu = statistics.median(c for _, c in ts)
        print(
            f"   {name:<56} {wall:6.3f} s {wall / base_wall - 1:+6.1%} | "
            f"{cpu:6.3f} s {cpu / base_cpu - 1:+6.1%}"
        )


def training_step_overhead() -> None:
    import torch
    import transformers

    from tinykit.memory.track import track_memory

    config = transformers.OPTConfig(
        hidden_size=768,
        ffn_dim=3072,
        num_attention_heads=12,
        num_hidden_layers=2,
        vocab_size=50272,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    model = transformers.OPTForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50272, (2, 128))

    def step() -> None:
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()  # warm: optimizer state exists, kernels are chosen
    plain, tracked = [], []
    for _ in range(7):  # interleaved; CPU time counts the sampler thread's work too
        wall, cpu = time.perf_counter(), time.process_time()
        step()
        plain.append((time.perf_counter() - wall, time.process_time() - cpu))
        wall, cpu = time.perf_counter(), time.process_time()
        with track_memory():
            step()
        tracked.append((time.perf_counter() - wall, time.process_time() - cpu))
    print("2. training step of a real-width 2-layer OPT (batch 2 x 128), median of 7 (wall | CPU)")
    aw, ac = (statistics.median(x[i] for x in plain) for i in (0, 1))
    bw, bc = (statistics.median(x[i] for x in tracked) for i in (0, 1))
    print(f"   {'no tracking':<40} {aw * 1000:8.1f} ms        | {ac * 1000:8.1f} ms")
    print(
        f"   {'track_memory()':<40} {bw * 1000:8.1f} ms {bw / aw - 1:+6.1%} | "
        f"{bc * 1000:8.1f} ms {bc / ac - 1:+6.1%}"
    )


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
    rows.append(("kernel peak (default), sampler every 5 ms", 0.005, True))
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

    print("4. projection from 1-2 layers vs the measured full depth (host peak, CPU)")
    cases = [
        ("facebook/opt-125m", {"train": False}),
        ("facebook/opt-125m", {"train": True, "optimizer": "adamw"}),
        ("ibm-granite/granite-3.1-1b-a400m-instruct", {"train": False}),
    ]
    for repo, kwargs in cases:
        p = project_memory(str(HUB_FILES / repo), seq=128, dtype="bfloat16", full=True, **kwargs)
        print(p.summary())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projection", action="store_true", help="also run the projections")
    args = parser.parse_args()
    marker_overhead()
    training_step_overhead()
    spike_table()
    if args.projection:
        projections()


if __name__ == "__main__":
    main()
