"""Benchmark: tinykit make-tiny vs the naive recipe on the 25 native dev-set configs, side by side.

    python benchmarks/make_tiny.py [--cli-runs 3]

Naive recipe (what people do by hand): load the config, set the common size knobs on the
top-level config only (hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
num_key_value_heads=2, intermediate_size=64), keep the vocab, build, save_pretrained.
Naive models too big to build here (> 200M params) are sized on the meta device (marked *).
Prints per config: bytes and warm build seconds of both; then the warm build median and max
over the dev set of both, side by side, with the ratio tinykit/naive; the size ratio; and the
wall time of whole `tinykit make-tiny <folder>` CLI calls, each beside its floor: a bare
interpreter importing transformers.modeling_utils (torch and transformers' model base, which
any model build needs; ~85% of the CLI call on a 2-core box). `--repeat N` goes over the dev set
N times and keeps each config's fastest build (on a busy machine, to see past other processes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HUB_FILES = REPO.parent / "shared" / "hub-files"
NAIVE_KNOBS = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
}
MAX_REAL_PARAMS = 200_000_000


def naive(folder: Path, out: Path) -> tuple[int, float, str]:
    import torch
    import transformers

    raw = json.loads((folder / "config.json").read_text())
    raw = {k: v for k, v in raw.items() if k not in ("auto_map", "quantization_config")}
    started = time.perf_counter()
    try:
        config = transformers.CONFIG_MAPPING[raw["model_type"]].from_dict({**raw, **NAIVE_KNOBS})
        cls = getattr(transformers, raw["architectures"][0])
        with torch.device("meta"):
            params = sum(p.numel() for p in cls._from_config(config).parameters())
        if params > MAX_REAL_PARAMS:
            return params * 4, time.perf_counter() - started, "*"
        cls._from_config(config, dtype=torch.float32).save_pretrained(out)
    except Exception as e:  # the naive recipe failing is a result, not a crash
        return 0, time.perf_counter() - started, f"failed: {type(e).__name__}"
    return sum(p.stat().st_size for p in out.iterdir()), time.perf_counter() - started, ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli-runs", type=int, default=3)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds over the dev set; each config's fastest counts",
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    from tinykit.model.build import make_tiny

    folders = sorted(p.parent for p in HUB_FILES.glob("*/*/config.json") if "chatglm" not in str(p))
    with tempfile.TemporaryDirectory() as tmp:
        make_tiny("llama", Path(tmp) / "warmup")  # first build pays transformers' imports
        rows = []
        print(
            f"{'config':45s} {'tinykit bytes':>14s} {'s':>6s} | {'naive bytes':>14s} {'s':>6s} | ratio"
        )
        # --repeat rounds over the whole dev set, not N builds of a config in a row: a burst of
        # load from elsewhere on the machine then slows one build of a config, not all of them
        builds: dict[str, list] = {}
        naives: dict[str, list] = {}
        for round_ in range(args.repeat):
            for folder in folders:
                name = f"{folder.parent.name}/{folder.name}"
                out = Path(tmp) / str(round_) / name
                builds.setdefault(name, []).append(make_tiny(folder, out / "t"))
                naives.setdefault(name, []).append(naive(folder, out / "n"))
        for name in builds:
            t = min(builds[name], key=lambda b: b.seconds)
            nb, ns, note = min(naives[name], key=lambda n: n[1])
            ratio = nb / t.bytes if nb else float("nan")
            rows.append((name, t.bytes, t.seconds, nb, ns, ratio, note))
            print(
                f"{name:45s} {t.bytes:>14,} {t.seconds:6.3f} | {nb:>14,}{note[:1] or ' '} {ns:6.3f} | "
                f"{ratio:8.1f}x {note if note.startswith('failed') else ''}"
            )
        cli, floor = [], []
        for _ in range(args.cli_runs):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import transformers.modeling_utils"], check=True)
            floor.append(time.perf_counter() - started)
            started = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tinykit",
                    "make-tiny",
                    str(HUB_FILES / "Qwen/Qwen3-30B-A3B"),
                    "-o",
                    str(Path(tmp) / "cli"),
                    "--force",
                ],
                check=True,
                capture_output=True,
            )
            cli.append(time.perf_counter() - started)
    ratios = [r[5] for r in rows if r[3]]
    print()
    print(f"configs: {len(rows)}; naive recipe failed on {sum(1 for r in rows if not r[3])}")
    t_med, t_max = statistics.median(r[2] for r in rows), max(r[2] for r in rows)
    n_med, n_max = statistics.median(r[4] for r in rows), max(r[4] for r in rows)
    print(
        f"warm build over the dev set: tinykit median {t_med:.3f} s, max {t_max:.3f} s "
        f"(goal: median <= 0.2 s, max <= 0.5 s) | naive median {n_med:.3f} s, max {n_max:.3f} s"
    )
    print(f"warm build ratio tinykit/naive: median {t_med / n_med:.1f}x, max {t_max / n_max:.1f}x")
    print(
        f"median size: tinykit {statistics.median(r[1] for r in rows):,.0f} B, "
        f"naive {statistics.median(r[3] for r in rows if r[3]):,.0f} B"
    )
    print(f"median size ratio naive/tinykit: {statistics.median(ratios):.1f}x (goal >= 10x)")
    if not cli:  # --cli-runs 0: the warm builds only
        return
    print(
        f"whole CLI call `tinykit make-tiny <local folder>`: "
        f"{', '.join(f'{c:.2f}' for c in cli)} s (goal <= 5 s) | floor, "
        f"`python -c 'import transformers.modeling_utils'`: {', '.join(f'{f:.2f}' for f in floor)} s"
    )
    print(
        f"CLI call minus its floor: median {statistics.median(cli) - statistics.median(floor):.2f} s"
    )


if __name__ == "__main__":
    main()
