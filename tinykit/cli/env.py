"""`tinykit env capture [-o FILE]` and `tinykit env diff A B`: what a run ran on, what changed."""

from __future__ import annotations

import argparse
import dataclasses

from tinykit.cli import emit

EXAMPLES = [
    "tinykit env capture -o env.json",
    "tinykit env diff before.json after.json",
]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "env",
        help="capture the software/hardware environment (secrets redacted), or diff two",
        epilog="examples:\n  " + "\n  ".join(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="env_command", metavar="ACTION", required=True)
    cap = actions.add_parser("capture", help="write the environment bundle as JSON")
    cap.add_argument(
        "-o", "--output", metavar="FILE", help="write the bundle here (default: print it to stdout)"
    )
    cap.add_argument("--force", action="store_true", help="replace FILE if it exists")
    cap.add_argument(
        "--all-env",
        action="store_true",
        help="keep all environment variables, not only relevant ones (still redacted)",
    )
    cap.set_defaults(func=run_capture)
    dif = actions.add_parser("diff", help="what differs between two bundles, most relevant first")
    dif.add_argument("a", metavar="A", help="first bundle (from tinykit env capture -o)")
    dif.add_argument("b", metavar="B", help="second bundle")
    dif.add_argument("--json", action="store_true", help="print the differences as JSON")
    dif.set_defaults(func=run_diff)


def run_capture(args: argparse.Namespace) -> int:
    from tinykit._files import check_output_file
    from tinykit.repro.env import capture, to_json

    if args.output:  # before the capture (seconds): a bundle kept by hand is not overwritten
        check_output_file(args.output, args.force)
    bundle = capture(args.output, all_env=args.all_env)
    if args.output:
        print(
            f"wrote {args.output} ({len(bundle['packages'])} packages, "
            f"{len(bundle['env'])} environment variables, secrets redacted)"
        )
    else:
        print(to_json(bundle), end="")
    return 0


def run_diff(args: argparse.Namespace) -> int:
    from tinykit.repro.env import diff

    result = diff(args.a, args.b)
    emit(dataclasses.asdict(result), args.json, result.render())
    return 0
