"""`tinykit standins build|discover`: the Hub repos a test suite needs, from a manifest."""

from __future__ import annotations

import argparse
import sys

from tinykit.cli import emit
from tinykit.cli._args import OneLineParser, count, split_command, timeout_option
from tinykit.errors import UsageError

EXAMPLES = """examples:
  tinykit standins discover -o standins.toml -- python -m pytest -x tests/test_models.py
  tinykit standins build standins.toml -o hub
  tinykit hub serve hub      # then run the suite with the printed HF_ENDPOINT
"""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "standins",
        help="build the Hub repos a test suite needs from a manifest, or draft one",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="standins_command", metavar="ACTION", required=True)
    build = actions.add_parser(
        "build",
        help="build every entry of MANIFEST.toml into a folder `tinykit hub serve` serves",
        description="Build every model and dataset entry of a stand-in manifest in one process "
        "(cached: a second build copies), into HUBDIR/<org>/<name>/, HUBDIR/datasets/<org>/<name>/ "
        "and HUBDIR/_revisions/<type>/<org>/<name>/<branch>/. See docs/standins.md.",
    )
    build.add_argument("manifest", metavar="MANIFEST.toml")
    build.add_argument("-o", "--out", required=True, metavar="HUBDIR", help="the hub folder")
    build.add_argument("--force", action="store_true", help="replace HUBDIR if it is not empty")
    build.add_argument("--cache-dir", metavar="DIR", help="artifact cache (default: TINYKIT_CACHE)")
    build.add_argument(
        "--keep-going",
        action="store_true",
        help="build every good entry and list every failing one (exit 1 if any failed)",
    )
    build.add_argument("--json", action="store_true", help="print the report as JSON")
    build.set_defaults(func=run_build)

    opts = OneLineParser(add_help=False, prog="tinykit standins discover")
    opts.add_argument(
        "-o", "--out", metavar="MANIFEST", help="write the draft here (default: stdout)"
    )
    opts.add_argument("--force", action="store_true", help="replace MANIFEST if it exists")
    timeout_option(opts, "each pass of CMD (what it asked so far still counts)")
    opts.add_argument(
        "--sources",
        nargs="+",
        default=[],
        metavar="DIR",
        help="folders of local repo copies: a repo asked for is drafted from the one of its name",
    )
    opts.add_argument(
        "--passes",
        type=count(1, 20),
        default=3,
        metavar="N",
        help="run CMD at most N times, serving the draft's stand-ins from pass 2 on (default 3)",
    )
    opts.add_argument("--cache-dir", metavar="DIR", help="artifact cache (default: TINYKIT_CACHE)")
    opts.add_argument("--json", action="store_true", help="print the repos asked for as JSON")
    discover = actions.add_parser(
        "discover",
        parents=[opts],
        help="run CMD against a recording Hub and draft the manifest it needs",
        description="Run CMD with HF_ENDPOINT set to a loopback Hub that records each repo and "
        "file asked for: first serving nothing (every repo 404 at once), then serving the "
        "draft's stand-ins so the suite asks for its front-end files and second repos, while "
        "the draft changes. Writes a draft manifest: a source per model from a --sources "
        "folder or its name, options inferred from the files asked, each with its reason; "
        "TODO entries (with why) where nothing can be inferred.",
    )
    discover.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command")
    discover.set_defaults(func=run_discover, options_parser=opts)


def run_build(args: argparse.Namespace) -> int:
    from tinykit.standins.build import build_standins

    report = build_standins(
        args.manifest,
        args.out,
        force=args.force,
        cache_dir=args.cache_dir,
        keep_going=args.keep_going,
    )
    lines = [e.line() for e in report.entries]
    lines.append(
        f"{len(report.entries)} stand-in(s) in {report.out} ({report.built} built, "
        f"{len(report.entries) - report.built} cached) in {report.seconds:.1f} s. "
        f"Serve them with: tinykit hub serve {report.out}"
    )
    if report.failed:
        lines += [f"FAILED {line}" for line in report.failed]
        lines.append(f"{len(report.failed)} entry(ies) failed: fix them and build again.")
    emit(report.to_dict(), args.json, "\n".join(lines))
    return 1 if report.failed else 0


def run_discover(args: argparse.Namespace) -> int:
    from tinykit.standins.discover import discover

    cmd = split_command(args)
    if not cmd:
        raise UsageError("no command to run. Put it after --, e.g. -- pytest -x tests/.")
    result = discover(
        cmd,
        args.out,
        timeout=args.timeout,
        sources=args.sources,
        passes=args.passes,
        cache_dir=args.cache_dir,
        force=args.force,
    )
    if args.json:
        emit(result.to_dict(), True, "")
    elif args.out:
        print(
            f"{len(result.repos)} repo(s) asked for in {len(result.passes)} pass(es); draft "
            f"manifest written to {args.out}"
        )
    else:
        sys.stdout.write(result.manifest)
    print(
        f"tinykit: the command exited {result.returncode} (404s make its tests fail; expected)",
        file=sys.stderr,
    )
    return 0
