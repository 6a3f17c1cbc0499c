"""`tinykit bisect versions|commits ... -- CMD`: find the release or commit that broke CMD."""

from __future__ import annotations

import argparse
import sys

from tinykit.cli import emit
from tinykit.cli._args import OneLineParser, comma_list, count, regex, split_command, timeout_option
from tinykit.errors import BisectError

EXAMPLES = [
    "tinykit bisect versions transformers --good 5.0.0 --bad 5.3.0 -- pytest -x tests/test_x.py",
    "tinykit bisect versions mypkg --good 1.0 --bad 1.9 --find-links wheels/ --repeat 3 -- ./repro.sh",
    "tinykit bisect commits --repo ./transformers --good v5.1.0 --bad v5.2.0 -- python repro.py",
    "tinykit bisect versions tknum --good 1.0 --bad 1.4 --find-links wheels/ --record -- python t.py",
]


def _command(args: argparse.Namespace) -> list[str]:
    cmd = split_command(args)
    for name in ("good", "bad"):
        if getattr(args, name) is None:
            raise BisectError(f"--{name} is required. Example: {EXAMPLES[0]}")
    if not cmd:
        raise BisectError(
            "no command to run at each step. Put it after --, e.g. -- pytest -x t.py."
        )
    return cmd


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--good", metavar="OLD", help="where CMD passes (required)")
    p.add_argument("--bad", metavar="NEW", help="a later one where CMD fails (required)")
    timeout_option(p, "a step and count it a timeout")
    p.add_argument("--term-old", default="good", help="name for the old state (e.g. broken)")
    p.add_argument("--term-new", default="bad", help="name for the new state (e.g. fixed)")
    p.add_argument(
        "--record",
        action="store_true",
        help="then record CMD at the last good and the first bad point (tinykit record) and "
        "name the first diverging module (or input, or parameter) of the two dumps",
    )
    p.add_argument(
        "--record-dir", metavar="DIR", help="where --record writes its dumps (default: a temp dir)"
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _parsers(actions: argparse._SubParsersAction, name: str, helptext: str, add):
    """The action's parser, and a twin holding only its options (see `_command`)."""
    opts = OneLineParser(add_help=False, prog=f"tinykit bisect {name}")
    add(opts)
    _common(opts)
    p = actions.add_parser(name, help=helptext, parents=[opts])
    return p, opts


def _versions_options(v: argparse.ArgumentParser) -> None:
    v.add_argument("--versions", metavar="A,B,C", help="search these releases, not the index's")
    v.add_argument("--pre", action="store_true", help="include pre-releases")
    v.add_argument(
        "--repeat", type=count(1, 100), default=1, metavar="N", help="runs per step (flaky check)"
    )
    v.add_argument(
        "--skip-on", type=regex, metavar="REGEX", help="output matching this makes a step a skip"
    )
    v.add_argument("--find-links", metavar="DIR", help="a local wheel folder instead of the index")
    v.add_argument("--index-url", metavar="URL", help="the package index to use")
    v.add_argument("--cache-dir", metavar="DIR", help="where environments are cached")
    v.add_argument("--no-env-capture", action="store_true", help="skip the env diff of both ends")


def _commits_options(c: argparse.ArgumentParser) -> None:
    c.add_argument("--repo", metavar="PATH", help="a local git clone (required)")
    c.add_argument(
        "--from-versions",
        action="store_true",
        help="--good/--bad are released versions: use their tags (v1.2.3 or 1.2.3)",
    )
    c.add_argument(
        "--install",
        default="python -m pip install --no-deps --no-build-isolation -e .",
        metavar="CMD",
        help="how each checkout is installed (in a private venv over this one)",
    )
    c.add_argument("--package", metavar="NAME", help="import name checked to come from the clone")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "bisect",
        help="find the first bad release of a package, or the first bad commit of a clone",
        epilog="examples:\n  " + "\n  ".join(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="bisect_command", metavar="ACTION", required=True)
    v, v_opts = _parsers(
        actions, "versions", "binary-search the released versions of PACKAGE", _versions_options
    )
    v.add_argument("package", metavar="PACKAGE")
    v.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the predicate")
    v.set_defaults(func=run_versions, options_parser=v_opts)
    c, c_opts = _parsers(
        actions, "commits", "drive git bisect run on a local clone", _commits_options
    )
    c.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the predicate")
    c.set_defaults(func=run_commits, options_parser=c_opts)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_versions(args: argparse.Namespace) -> int:
    from tinykit.bisect.versions import bisect_versions

    cmd = _command(args)
    result = bisect_versions(
        args.package,
        args.good,
        args.bad,
        cmd,
        versions=comma_list(args.versions),
        pre=args.pre,
        repeat=args.repeat,
        timeout=args.timeout,
        skip_on=args.skip_on,
        terms=(args.term_old, args.term_new),
        find_links=args.find_links,
        index_url=args.index_url,
        cache_dir=args.cache_dir,
        capture_env=not args.no_env_capture,
        log=None if args.json else _log,
        record=args.record,
        record_dir=args.record_dir,
    )
    emit(result.to_dict(), args.json, result.render())
    return 0 if result.found else 1


def run_commits(args: argparse.Namespace) -> int:
    from tinykit.bisect.commits import bisect_commits

    cmd = _command(args)
    if not args.repo:
        raise BisectError(f"--repo is required. Example: {EXAMPLES[2]}")
    result = bisect_commits(
        args.repo,
        args.good,
        args.bad,
        cmd,
        install=args.install,
        package=args.package,
        from_versions=args.from_versions,
        timeout=args.timeout,
        terms=(args.term_old, args.term_new),
        log=None if args.json else _log,
        record=args.record,
        record_dir=args.record_dir,
    )
    emit(result.to_dict(), args.json, result.render())
    return 0 if result.found else 1
