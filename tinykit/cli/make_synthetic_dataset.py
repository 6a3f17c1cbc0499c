"""`tinykit make-synthetic-dataset`: rows drawn from a Features schema, no real data."""

from __future__ import annotations

import argparse

EXAMPLES = [
    "tinykit make-synthetic-dataset --features features.json --rows 50 --seed 1 -o synth",
    "tinykit make-synthetic-dataset org/name --rows 10 -o synth-name   # same schema, fake rows",
]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "make-synthetic-dataset",
        help="dataset of synthetic rows for a Features schema (or another dataset's schema)",
        description="Draw rows with Hypothesis from a `Features.to_dict()` JSON file, or from the "
        "configs, splits and features of an existing dataset, and write parquet plus a README.md "
        "card. Same schema, seed and versions give byte-identical files.",
        epilog="examples:\n  " + "\n  ".join(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "source", nargs="?", help="Hub dataset id, folder or data file to copy the schema of"
    )
    what.add_argument("--features", metavar="JSON", help="file holding Features.to_dict() as JSON")
    p.add_argument(
        "--rows",
        default="20",
        metavar="N|SPLIT=N,...",
        help="rows of every split, 1-10000 (default: 20), or per split: train=17,test=2 (a "
        "schema gets those splits; a source's are chosen among its own)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument(
        "--no-nulls",
        dest="nulls",
        action="store_false",
        help="never None in any column (a stand-in of real data; default: None now and then)",
    )
    p.add_argument("-o", "--out", help="output folder (default: ./synthetic-dataset)")
    p.add_argument("--force", action="store_true", help="replace an existing output folder")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinykit.cli import emit
    from tinykit.dataset.synthetic import make_synthetic_dataset, parse_rows, read_features_file

    result = make_synthetic_dataset(
        read_features_file(args.features) if args.features else args.source,
        args.out,
        rows=parse_rows(args.rows),
        seed=args.seed,
        nulls=args.nulls,
        force=args.force,
    )
    emit(result.to_dict(), args.json, result.text)
    return 0
