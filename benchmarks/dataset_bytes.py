"""Bytes read by make_tiny_dataset vs. a full download, through the loopback Hub.

    python benchmarks/dataset_bytes.py [--mb 210] [--rows 100]

Builds a >= 200 MB parquet dataset in a temp dir (text rows of ~1 kB of random characters,
uncompressed so the size is what it says; row groups of 1,000 rows, as `datasets` writes them),
serves it with `tinykit.hub.server`, then in the same run:

1. `make_tiny_dataset("bench/big", rows=100)`: bytes the Hub sent (ranged GETs);
2. the baseline, `datasets.load_dataset("bench/big", split="train")` then `.select(range(100))`:
   bytes the Hub sent for the full download.

Bytes are counted on the server side from its request log: a 206 counts its Range, a 200
counts the whole file. Target (issue #5): tinykit reads <= 5% of the source.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROWS_PER_GROUP = 1_000
ROW_CHARS = 1_000
REPO = "bench/big"


def build_source(root: Path, megabytes: int) -> Path:
    path = root / "datasets" / REPO / "data" / "train-00000-of-00001.parquet"
    path.parent.mkdir(parents=True)
    rng = np.random.default_rng(0)
    alphabet = np.frombuffer(
        b"abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", np.uint8
    )
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    groups = megabytes * 2**20 // (ROWS_PER_GROUP * ROW_CHARS) + 1
    with pq.ParquetWriter(path, schema, compression="none") as writer:
        for g in range(groups):
            # lengths vary so the short/long/typical picks are real choices
            lengths = rng.integers(ROW_CHARS // 2, ROW_CHARS * 3 // 2, ROWS_PER_GROUP)
            chars = alphabet[rng.integers(0, len(alphabet), int(lengths.sum()))].tobytes().decode()
            cuts = np.concatenate([[0], np.cumsum(lengths)])
            texts = [chars[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
            ids = np.arange(g * ROWS_PER_GROUP, (g + 1) * ROWS_PER_GROUP)
            writer.write_table(pa.table({"id": ids, "text": texts}, schema=schema))
    return path


def bytes_sent(log, file_size: int) -> int:
    """Body bytes the Hub and its CDN sent for file GETs (206: the Range; 200: the file)."""
    total = 0
    for r in log.records:
        if r.method != "GET" or r.filename is None or r.status not in (200, 206):
            continue
        if r.status == 206 and r.range:
            start, _, end = r.range.removeprefix("bytes=").partition("-")
            end_i = min(int(end), file_size - 1) if end else file_size - 1
            total += end_i - int(start) + 1
        else:
            total += file_size
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=210, help="source size in MB (default 210)")
    parser.add_argument("--rows", type=int, default=100, help="rows to keep (default 100)")
    args = parser.parse_args()

    from tinykit.dataset.build import make_tiny_dataset
    from tinykit.hub.client import use_endpoint
    from tinykit.hub.server import serve

    with tempfile.TemporaryDirectory(prefix="tinykit-bench-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        source = build_source(root / "hub", args.mb)
        size = source.stat().st_size
        print(
            f"source: {size:,} bytes ({size / 2**20:.1f} MiB), "
            f"{pq.ParquetFile(source).metadata.num_rows:,} rows, "
            f"{pq.ParquetFile(source).metadata.num_row_groups} row groups "
            f"(built in {time.perf_counter() - t:.1f} s)"
        )
        with serve(root / "hub") as hub, use_endpoint(hub.endpoint, cache_dir=root / "hf-cache"):
            t = time.perf_counter()
            out = make_tiny_dataset(REPO, rows=args.rows, out=root / "tiny")
            tiny_s, tiny_bytes = time.perf_counter() - t, bytes_sent(hub.log, size)
            hub.log.clear()

            import datasets

            t = time.perf_counter()
            full = datasets.load_dataset(REPO, split="train", cache_dir=str(root / "ds-cache"))
            full.select(range(args.rows))
            full_s, full_bytes = time.perf_counter() - t, bytes_sent(hub.log, size)
        tiny_rows = pq.ParquetFile(next(out.path.rglob("*.parquet"))).metadata.num_rows

    print(
        f"tinykit make_tiny_dataset ({tiny_rows} rows): {tiny_bytes:>13,} bytes read "
        f"= {100 * tiny_bytes / size:.2f}% of the source, {tiny_s:.1f} s"
    )
    print(
        f"baseline load_dataset + select ({args.rows} rows): {full_bytes:>13,} bytes read "
        f"= {100 * full_bytes / size:.2f}% of the source, {full_s:.1f} s"
    )
    print(
        f"ratio tinykit / baseline: {tiny_bytes / full_bytes:.4f} "
        f"({full_bytes / max(tiny_bytes, 1):.0f}x fewer bytes)"
    )
    ok = tiny_bytes <= 0.05 * size
    print(f"target <= 5% of the source: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    sys.exit(main())
