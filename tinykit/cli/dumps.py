"""`tinykit dumps diff A B`: name the first module where two recordings diverge."""

from __future__ import annotations

import argparse

from tinykit.cli import emit

EXAMPLES = [
    "tinykit dumps diff run-a/ run-b/",
    "tinykit dumps diff fp32/ bf16/ --rtol 1e-2 --atol 1e-3 --html diff.html",
    "tinykit dumps diff a/ b/ --json",
]


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dumps",
        help="compare recordings made by tinykit.record(model, out=DIR)",
        epilog="examples:\n  " + "\n  ".join(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="dumps_command", metavar="ACTION", required=True)
    d = actions.add_parser(
        "diff",
        help="align two dumps; name the first record whose output differs while its inputs "
        "matched; exit 1 when they differ",
    )
    d.add_argument("a", metavar="A", help="the reference dump folder")
    d.add_argument("b", metavar="B", help="the dump folder compared against it")
    d.add_argument(
        "--rtol", type=_tolerance, default=None, help="relative tolerance (default: per dtype)"
    )
    d.add_argument(
        "--atol", type=_tolerance, default=None, help="absolute tolerance (default: per dtype)"
    )
    d.add_argument("--json", action="store_true", help="print the diff as JSON")
    d.add_argument("--plot", metavar="FILE.png", help="also draw the error by layer (matplotlib)")
    d.add_argument("--html", metavar="FILE.html", help="also write an HTML report")
    d.add_argument("--force", action="store_true", help="replace FILE.png, FILE.html if they exist")
    d.set_defaults(func=run_diff)


def run_diff(args: argparse.Namespace) -> int:
    from tinykit._files import check_output_file
    from tinykit.numerics.diff import diff_dumps
    from tinykit.numerics.report import plot_diff, write_html

    for flag, path in (("--plot", args.plot), ("--html", args.html)):
        if path:  # before the (maybe long) diff, and never over a kept report
            check_output_file(path, args.force, flag)
    result = diff_dumps(args.a, args.b, rtol=args.rtol, atol=args.atol)
    if args.plot:
        plot_diff(result, args.plot)
    if args.html:
        write_html(result, args.html)
    emit(result.to_dict(), args.json, result.text())
    return 0 if result.equal else 1
