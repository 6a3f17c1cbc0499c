"""Tiny tokenizer vs keeping the full one: bytes on disk and AutoTokenizer load time, side by side.

Run: python benchmarks/tokenizer.py [--vocab 1024] [--repeat 3]
Baseline (the issue's): keeping the source's full tokenizer files, as TRL's tiny models do.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
HUB_FILES = Path(os.environ.get("TINYKIT_SHARED", REPO.parent / "shared")) / "hub-files"
SOURCES = [
    "openai-community/gpt2-xl",
    "facebook/bart-large-cnn",
    "Qwen/Qwen2.5-VL-7B-Instruct",
    "tiiuae/falcon-180B-chat",
    "meta-llama/Llama-2-7b-hf",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "mistralai/Mixtral-8x7B-v0.1",
    "google-t5/t5-base",
    "google-bert/bert-base-uncased",
]
TOKENIZER_FILES = {
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "spiece.model",
    "tokenizer.model",
    "added_tokens.json",
    "chat_template.json",
    "chat_template.jinja",
}


def tokenizer_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.name in TOKENIZER_FILES)


def load_seconds(folder: Path, repeat: int) -> float:
    from transformers import AutoTokenizer

    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        AutoTokenizer.from_pretrained(folder)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from tinykit.tokenizer.build import shrink_tokenizer

    AutoTokenizer.from_pretrained(HUB_FILES / SOURCES[-1])  # warm the imports once
    print(
        f"{'source':36} {'full KB':>9} {'tiny KB':>8} {'size x':>7} {'full load s':>11} "
        f"{'tiny load s':>11} {'load x':>7} {'shrink s':>8}"
    )
    totals = [0, 0, 0.0, 0.0]
    with tempfile.TemporaryDirectory() as tmp:
        for repo in SOURCES:
            src, out = HUB_FILES / repo, Path(tmp) / repo.replace("/", "_")
            start = time.perf_counter()
            shrink_tokenizer(src, out, vocab=args.vocab)
            shrink_s = time.perf_counter() - start
            full_b, tiny_b = tokenizer_bytes(src), tokenizer_bytes(out)
            full_s, tiny_s = load_seconds(src, args.repeat), load_seconds(out, args.repeat)
            totals = [
                totals[0] + full_b,
                totals[1] + tiny_b,
                totals[2] + full_s,
                totals[3] + tiny_s,
            ]
            print(
                f"{repo:36} {full_b / 1024:9.1f} {tiny_b / 1024:8.1f} {full_b / tiny_b:7.1f} "
                f"{full_s:11.3f} {tiny_s:11.3f} {full_s / tiny_s:7.1f} {shrink_s:8.2f}"
            )
    full_b, tiny_b, full_s, tiny_s = totals
    print(
        f"{'TOTAL':36} {full_b / 1024:9.1f} {tiny_b / 1024:8.1f} {full_b / tiny_b:7.1f} "
        f"{full_s:11.3f} {tiny_s:11.3f} {full_s / tiny_s:7.1f}"
    )


if __name__ == "__main__":
    main()
