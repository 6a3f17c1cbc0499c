"""`tinykit matrix PACKAGE --versions a,b,c -- CMD`: one command under several package versions."""

from __future__ import annotations

import argparse

from tinykit.cli import emit
from tinykit.cli._args import OneLineParser, comma_list, count, regex, split_command, timeout_option

EXAMPLES = [
    "tinykit matrix transformers --since 5.0 -- pytest -x -q tests/test_x.py",
    "tinykit matrix mypkg --versions 1.0,1.5,1.9 --find-links wheels/ --json -- ./repro.sh",
]


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--versions", metavar="A,B,C", help="these versions")
    p.add_argument("--since", metavar="FLOOR", help="the latest patch of each minor from FLOOR on")
    p.add_argument("--repeat", type=count(1, 100), default=1, metavar="N", help="runs per version")
    timeout_option(p, "a run and count it a timeout")
    p.add_argument(
        "--skip-on", type=regex, metavar="REGEX", help="output matching this makes a run a skip"
    )
    p.add_argument("--find-links", metavar="DIR", help="a local wheel folder instead of the index")
    p.add_argument("--index-url", metavar="URL", help="the package index to use")
    p.add_argument("--cache-dir", metavar="DIR", help="where environments are cached")
    p.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")


def register(sub: argparse._SubParsersAction) -> None:
    opts = OneLineParser(add_help=False, prog="tinykit matrix")
    _options(opts)
    p = sub.add_parser(
        "matrix",
        help="run one command under several versions of a package; a table of outcomes",
        parents=[opts],
        epilog="examples:\n  " + "\n  ".join(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("package", metavar="PACKAGE")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command")
    p.set_defaults(func=run, options_parser=opts)


def run(args: argparse.Namespace) -> int:
    from tinykit.bisect.matrix import run_matrix

    cmd = split_command(args)
    result = run_matrix(
        args.package,
        cmd,
        versions=comma_list(args.versions),
        since=args.since,
        repeat=args.repeat,
        timeout=args.timeout,
        skip_on=args.skip_on,
        find_links=args.find_links,
        index_url=args.index_url,
        cache_dir=args.cache_dir,
    )
    emit(result.to_dict(), args.json, result.markdown())
    return 0 if result.ok else 1
