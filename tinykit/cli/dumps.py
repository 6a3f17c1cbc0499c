"""`tinykit dumps diff A B`: name the first module where two recordings diverge;
`tinykit dumps versions PKG A B -- CMD`: record CMD under two versions of PKG and diff them."""

from __future__ import annotations

import argparse

from tinykit.cli import emit
from tinykit.cli._args import timeout_option

EXAMPLES = [
    "tinykit dumps diff run-a/ run-b/",
    "tinykit dumps diff fp32/ bf16/ --rtol 1e-2 --atol 1e-3 --html diff.html",
    "tinykit dumps diff a/ b/ --json",
    "tinykit dumps diff full-run/ resumed/ --align-steps 4:0",
    "tinykit dumps versions transformers 5.22.2 5.24.0 -- python repro.py",
]


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def _steps(text: str) -> tuple[int, int]:
    a, sep, b = text.partition(":")
    if not sep or not a.strip().isdigit() or not b.strip().isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not A:B (step A of the first dump is step B of the second, e.g. 4:0)"
        )
    return int(a), int(b)


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
    d.add_argument(
        "--align-steps",
        type=_steps,
        metavar="A:B",
        help="step A of the first dump is step B of the second (a resumed run recorded "
        "without first_step)",
    )
    d.add_argument("--json", action="store_true", help="print the diff as JSON")
    d.add_argument("--plot", metavar="FILE.png", help="also draw the error by layer (matplotlib)")
    d.add_argument("--html", metavar="FILE.html", help="also write an HTML report")
    d.add_argument("--force", action="store_true", help="replace FILE.png, FILE.html if they exist")
    d.set_defaults(func=run_diff)
    opts = argparse.ArgumentParser(add_help=False, prog="tinykit dumps versions")
    _versions_options(opts)
    v = actions.add_parser(
        "versions",
        parents=[opts],
        help="record CMD with PACKAGE at version A and at B (cached overlays) and name the "
        "first divergence; exit 1 when they differ",
    )
    v.add_argument("package", metavar="PACKAGE")
    v.add_argument("old", metavar="A", help="the reference version")
    v.add_argument("new", metavar="B", help="the version compared against it")
    v.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command")
    v.set_defaults(func=run_versions, options_parser=opts)


def _versions_options(v: argparse.ArgumentParser) -> None:
    v.add_argument("-o", "--out", metavar="DIR", help="where the two dumps go (default: temp)")
    v.add_argument("--modules", default="*", metavar="GLOB", help="modules to record (default *)")
    v.add_argument(
        "--tensors", choices=("stats", "full"), default="stats", help="stats (default) or full"
    )
    v.add_argument("--find-links", metavar="DIR", help="a local wheel folder instead of the index")
    v.add_argument("--index-url", metavar="URL", help="the package index to use")
    v.add_argument("--cache-dir", metavar="DIR", help="where environments are cached")
    timeout_option(v, "each recording of CMD")
    v.add_argument("--json", action="store_true", help="print the result as JSON")


def run_diff(args: argparse.Namespace) -> int:
    from tinykit._files import check_output_file
    from tinykit.numerics.diff import diff_dumps
    from tinykit.numerics.report import plot_diff, write_html

    for flag, path in (("--plot", args.plot), ("--html", args.html)):
        if path:  # before the (maybe long) diff, and never over a kept report
            check_output_file(path, args.force, flag)
    result = diff_dumps(
        args.a, args.b, rtol=args.rtol, atol=args.atol, align_steps=args.align_steps
    )
    if args.plot:
        plot_diff(result, args.plot)
    if args.html:
        write_html(result, args.html)
    emit(result.to_dict(), args.json, result.text())
    return 0 if result.equal else 1


def run_versions(args: argparse.Namespace) -> int:
    from tinykit.bisect.recorded import diff_versions
    from tinykit.cli._args import split_command
    from tinykit.errors import UsageError

    cmd = split_command(args)
    if not cmd:
        raise UsageError(f"no command to record. Put it after --, e.g. {EXAMPLES[-1]}")
    result = diff_versions(
        args.package,
        args.old,
        args.new,
        cmd,
        out=args.out,
        find_links=args.find_links,
        index_url=args.index_url,
        cache_dir=args.cache_dir,
        timeout=args.timeout,
        modules=args.modules,
        tensors=args.tensors,
    )
    if result.equal is None:
        raise UsageError(f"{result.first}. Dumps: {' '.join(result.dumps)}")
    emit(result.to_dict(), args.json, result.render())
    return 0 if result.equal else 1
