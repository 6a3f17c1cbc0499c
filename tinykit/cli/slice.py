"""`tinykit slice SOURCE`: a few-layer slice with real weights (adapter over tinykit.slice.build)."""

from __future__ import annotations

import argparse

from tinykit.cli import emit
from tinykit.cli._args import count


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "slice",
        help="cut a real model to a few layers, fetching only the kept tensors",
        description="Write a few-layer copy of SOURCE (a Hub id org/name[@revision] or a local "
        "folder of safetensors) with its real weights. Only the kept tensors are read: on the "
        "Hub by HTTP Range requests, never a full download. Pickle checkpoints are refused.",
    )
    p.add_argument("source")
    p.add_argument(
        "--layers",
        default="2",
        metavar="N|auto|I,J,...",
        help="the first N layers of every stack (default 2), auto (the first layer of every "
        "block type), or explicit source layer indexes",
    )
    p.add_argument("-o", "--out", required=True, help="output folder (must not exist)")
    p.add_argument("--revision", help="Hub revision: branch, tag or commit sha")
    p.add_argument(
        "--dtype", choices=["float32", "bfloat16", "float16"], help="default: the source's"
    )
    p.add_argument(
        "--max-shard-size",
        type=count(1, 1 << 50),
        default=None,
        metavar="BYTES",
        help="largest output shard (default 5 GiB)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="compare the slice's outputs with the full model over the kept layers "
        "(downloads the full model from the Hub)",
    )
    p.add_argument("--json", action="store_true", help="print a machine-readable result")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinykit.slice.build import DEFAULT_SHARD_BYTES, slice_model

    r = slice_model(
        args.source,
        args.out,
        layers=args.layers,
        revision=args.revision,
        dtype=args.dtype,
        check=args.check,
        max_shard_bytes=args.max_shard_size or DEFAULT_SHARD_BYTES,
    )
    kept = ", ".join(f"{k}: {v}" for k, v in r.layer_map.items())
    text = (
        f"{r.path}: {r.tensors} tensors, {r.bytes_kept:,} bytes kept, {r.bytes_fetched:,} bytes "
        f"read in {len(r.ranges)} range(s) (layers kept {kept})"
    )
    if r.check is not None:
        text += "; check: " + ", ".join(f"{k} equal" for k in r.check)
    emit(r.to_dict(), args.json, text)
    return 0
