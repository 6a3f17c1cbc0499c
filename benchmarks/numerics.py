"""What the numerics debugger costs per training step, beside the tools it replaces.

    python benchmarks/numerics.py [--reps 5] [--rss-steps 1000]

Two models, forward + backward + SGD step on CPU, one intra-op thread (steadier on a shared
machine): the tiny-llama fixture (2 layers, hidden 32) and a ~10M-parameter 12-layer Llama
(hidden 256, built from its config). Per model, side by side: a plain step, `detect_anomalies`
(full, and sampled every 10th step), transformers' `DebugUnderflowOverflow` (forward only),
`torch.autograd.detect_anomaly` (backward only), and `tinykit.record` with stats in memory
(ring buffer of 1000 records; with the step records: the inputs, the parameters at each step's
start and the loss), given the model or attached without it (`record()`: every root module
called). Each sample times 20 steps of the tiny decoder and 10 of the 10M
model (--steps-10m): with 3 steps per sample a neighbour's burst on the shared machine moved one
sample by 30% and the 10M ratios swung 1.4x-1.9x between runs; 10 steps (~2-6 s per sample)
average such bursts out and keep the whole run at ~6-8 minutes. The sampled mode runs 10 steps
per sample (one checked). Each rep runs a plain sample, then each mode's sample followed by
another plain one, --reps times: a mode's ratio is its CPU time over the mean of the two plain
samples beside it (the machine's speed drifts by 20% over a minute; a pair a few seconds apart
drifts much less), and the table gives the median per-step milliseconds and the median ratio,
with whether the issue's goal (on CPU time: wall time on a shared machine mostly measures the
neighbours) is met. Then the RSS of a `detect_anomalies` run (21-frame ring buffer) at step 10
and at step --rss-steps.
"""

from __future__ import annotations

import argparse
import copy
import resource
import statistics
import sys
import time
import warnings
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import tinykit  # noqa: E402

GOALS = {
    "detect full": 1.5,
    "detect sampled": 1.1,
    "record stats": 2.0,
    "record stats (attach)": 2.0,
}


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def tiny_decoder() -> torch.nn.Module:
    path = tinykit.fixture_path("tiny-llama")
    return transformers.AutoModelForCausalLM.from_pretrained(path)


def ten_million() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=12,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=1024,
        max_position_embeddings=128,
        use_cache=False,
    )
    return transformers.LlamaForCausalLM(config)


def modes(model: torch.nn.Module) -> dict[str, tuple[torch.nn.Module, object]]:
    """name -> (the model to step, a factory of the context the steps run in)."""
    from transformers.debug_utils import DebugUnderflowOverflow

    duo_model = copy.deepcopy(model)
    DebugUnderflowOverflow(duo_model)  # its hooks cannot be removed: it gets its own copy
    return {
        "plain": (model, nullcontext),
        "detect full": (model, lambda: tinykit.detect_anomalies(model)),
        "detect sampled": (model, lambda: tinykit.detect_anomalies(model, every=10)),
        "DebugUnderflowOverflow": (duo_model, nullcontext),
        "autograd.detect_anomaly": (model, torch.autograd.detect_anomaly),
        "record stats": (model, lambda: tinykit.record(model, frames=1000)),
        "record stats (attach)": (model, lambda: tinykit.record(frames=1000)),
    }


def run_steps(
    model: torch.nn.Module, ids: torch.Tensor, steps: int, context
) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per step."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # detect_anomaly warns that it is on, every time
        start, wall = cpu_seconds(), time.perf_counter()
        with context():
            for _ in range(steps):
                model(input_ids=ids, labels=ids).loss.backward()
                opt.step()
                opt.zero_grad()
        return (cpu_seconds() - start) / steps, (time.perf_counter() - wall) / steps


def bench(name: str, model: torch.nn.Module, ids: torch.Tensor, steps: int, reps: int) -> None:
    table = modes(model)
    for m, _ in table.values():  # warm up every model once
        run_steps(m, ids, 2, nullcontext)
    plain = table.pop("plain")
    samples: dict[str, list[tuple[float, float]]] = {"plain": [], **{k: [] for k in table}}
    # (CPU, wall) ratio of each sample to the mean of the plain samples just before and after
    ratios: dict[str, list[tuple[float, float]]] = {k: [] for k in table}
    for _ in range(reps):
        before = run_steps(plain[0], ids, steps, plain[1])
        samples["plain"].append(before)
        for mode, (m, context) in table.items():
            # a fresh detector checks its step 0: the sampled mode runs a whole period
            n = max(steps, 10) if mode == "detect sampled" else steps
            sample = run_steps(m, ids, n, context)
            after = run_steps(plain[0], ids, steps, plain[1])
            samples[mode].append(sample)
            samples["plain"].append(after)
            ratios[mode].append(
                tuple(s / ((b + a) / 2) for s, b, a in zip(sample, before, after, strict=True))
            )
            before = after
    params = sum(p.numel() for p in model.parameters())
    print(
        f"\n{name}: {params / 1e6:.2f}M parameters, batch {tuple(ids.shape)}, {steps} steps x {reps}"
    )
    print(
        f"  {'mode':<24} {'CPU ms':>8} {'x plain':>7} {'wall ms':>8} {'x plain':>7}  goal (on CPU)"
    )
    cpu = {k: statistics.median(c for c, _ in v) for k, v in samples.items()}
    wall = {k: statistics.median(w for _, w in v) for k, v in samples.items()}
    cpu_x = {k: statistics.median(c for c, _ in v) for k, v in ratios.items()}
    wall_x = {k: statistics.median(w for _, w in v) for k, v in ratios.items()}
    cpu_x["plain"] = wall_x["plain"] = 1.0
    for mode in samples:
        ratio = cpu_x[mode]
        goal = ""
        if mode in GOALS:
            goal = f"<= {GOALS[mode]}x {'met' if ratio <= GOALS[mode] else 'MISSED'}"
        if mode == "detect full":
            duo = ratio / cpu_x["DebugUnderflowOverflow"]
            goal += (
                f"; <= DebugUnderflowOverflow: {duo:.2f}x of it {'met' if duo <= 1 else 'MISSED'}"
            )
        print(
            f"  {mode:<24} {cpu[mode] * 1e3:>8.2f} {ratio:>6.2f}x {wall[mode] * 1e3:>8.2f} "
            f"{wall_x[mode]:>6.2f}x  {goal}"
        )


def rss(steps: int) -> None:
    model = tiny_decoder()
    ids = torch.arange(16).reshape(2, 8) % 50 + 3
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    process = psutil.Process()
    marks = {}
    with tinykit.detect_anomalies(model, frames=21):
        for step in range(1, steps + 1):
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
            if step in (10, steps):
                marks[step] = process.memory_info().rss / 2**20
    print("\nRSS with detect_anomalies (21-frame ring buffer) on the tiny decoder:")
    for step, mib in marks.items():
        print(f"  step {step:>5}: {mib:8.1f} MiB")
    print(f"  growth: {marks[steps] - marks[10]:+.1f} MiB over {steps - 10} steps")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rss-steps", type=int, default=1000)
    parser.add_argument("--steps-10m", type=int, default=10, help="steps per sample, 10M model")
    args = parser.parse_args()
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, 1 thread")
    bench(
        "tiny decoder (tiny-llama)",
        tiny_decoder(),
        torch.arange(16).reshape(2, 8) % 50 + 3,
        20,
        args.reps,
    )
    bench(
        "12-layer Llama",
        ten_million(),
        torch.arange(128).reshape(2, 64) % 1000 + 3,
        args.steps_10m,
        args.reps,
    )
    rss(args.rss_steps)


if __name__ == "__main__":
    main()
