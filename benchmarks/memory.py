"""What memory measurement costs, and what the sampling interval catches.

    python benchmarks/memory.py                 # overheads and the spike table (~2 minutes)
    python benchmarks/memory.py --projection    # + projections vs measured full depth (long)

1. The `tinykit_limit_memory` marker on a ~1-second test, against the same test unmarked:
   the test's call time from pytest's junit XML, three sessions each, medians.
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
import xml.etree.ElementTree as ET
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


def marker_overhead() -> None:
    rounds = _calibrate_rounds()
    times: dict[str, list[float]] = {}
    marks = {
        "no marker": "",
        "tinykit_limit_memory(host='1 GB') (top=5: tracemalloc on)": (
            "@pytest.mark.tinykit_limit_memory(host='1 GB')"
        ),
        "tinykit_limit_memory(host='1 GB', top=0)": (
            "@pytest.mark.tinykit_limit_memory(host='1 GB', top=0)"
        ),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):  # interleaved: load on a shared machine drifts
            for name, mark in marks.items():
                test = Path(tmp) / "test_bench.py"
                test.write_text(
                    ONE_SECOND_TEST.replace("ROUNDS", str(rounds)).replace("MARK", mark)
                )
                xml = Path(tmp) / "out.xml"
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pytest",
                        "-q",
                        "-p",
                        "no:randomly",
                        str(test),
                        f"--junitxml={xml}",
                        "-p",
                        "no:cacheprovider",
                    ],
                    cwd=tmp,
                    check=True,
                    capture_output=True,
                )
                case = ET.parse(xml).find(".//testcase")
                assert case is not None
                times.setdefault(name, []).append(float(case.get("time", "nan")))
    base = statistics.median(times["no marker"])
    print("1. budget marker on a ~1 s test (call time, median of 3 sessions)")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"   {name:<58} {med:6.3f} s  {med / base - 1:+6.1%}")


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
    for _ in range(7):
        t0 = time.perf_counter()
        step()
        plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with track_memory():
            step()
        tracked.append(time.perf_counter() - t0)
    a, b = statistics.median(plain), statistics.median(tracked)
    print("2. training step of a real-width 2-layer OPT (batch 2 x 128), median of 7")
    print(f"   {'no tracking':<40} {a * 1000:8.1f} ms")
    print(f"   {'track_memory()':<40} {b * 1000:8.1f} ms  {b / a - 1:+6.1%}")


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
