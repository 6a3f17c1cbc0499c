"""`tinykit make-tiny-dataset SOURCE`: a few representative rows of every config and split."""

from __future__ import annotations

import argparse

EXAMPLES = [
    "tinykit make-tiny-dataset org/name --rows 20 -o tiny-name",
    "tinykit make-tiny-dataset data/train.jsonl --rows 8",
    "tinykit make-tiny-dataset ./images --split train --rows 4 --force -o tiny-images",
]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "make-tiny-dataset",
        help="tiny copy of a Hub or local dataset (same configs, splits and features)",
        description="Stream a Hub dataset, a folder or data files and write a few representative "
        "rows per split as parquet plus a README.md card; images <= 32 px, audio <= 1 s.",
        epilog="examples:\n  " + "\n  ".join(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", nargs="+", help="Hub dataset id (org/name), folder, or data files")
    p.add_argument(
        "--rows",
        type=int,
        default=20,
        help="rows per split, 1-10000 (default: 20)",
    )
    p.add_argument(
        "--config",
        action="extend",
        nargs="+",
        dest="configs",
        metavar="C",
        help="keep only these configs (default: all)",
    )
    p.add_argument(
        "--split",
        action="extend",
        nargs="+",
        dest="splits",
        metavar="S",
        help="keep only these splits (default: all)",
    )
    p.add_argument("--revision", help="Hub branch, tag or commit sha (default: main)")
    p.add_argument("-o", "--out", help="output folder (default: ./tiny-<name>)")
    p.add_argument("--force", action="store_true", help="replace an existing output folder")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinykit.cli import emit
    from tinykit.dataset.build import make_tiny_dataset
    from tinykit.dataset.write import summarize

    source = args.source[0] if len(args.source) == 1 else args.source
    out = make_tiny_dataset(
        source,
        rows=args.rows,
        out=args.out,
        configs=args.configs,
        splits=args.splits,
        revision=args.revision,
        overwrite=args.force,
    )
    result = summarize(out)
    emit(result, args.json, result["text"])
    return 0
