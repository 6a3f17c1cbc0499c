"""`tinykit coverage`: build and verify every model type of the installed transformers."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tinykit.cli import emit

if TYPE_CHECKING:
    from tinykit.coverage.sweep import CoverageRow

GROUPS = ("text", "vision", "audio", "video", "multimodal")  # tinykit.coverage.sweep.GROUPS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "coverage",
        help="build + verify every model type of this transformers",
        description="Sweep every model type transformers maps to a causal, masked or "
        "seq2seq LM class (--all: every type with a model class), build it from its bare "
        "model_type, verify it on inputs of its modality within its size budget, and report "
        "pass/fail with the reason per type and a summary per group.",
    )
    p.add_argument("model_types", nargs="*", help="only these model types")
    p.add_argument(
        "--all", action="store_true", help="every type with a model class, not only text ones"
    )
    p.add_argument(
        "--group", action="append", choices=GROUPS, help="only this group (repeatable; --all)"
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="sweep in N worker processes (default 1: in this process)",
    )
    p.add_argument("--json", action="store_true", help="print a machine-readable report")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import contextlib
    import sys
    import time

    from tinykit.coverage.sweep import plan, summarize, summary_lines, sweep, sweep_in_processes
    from tinykit.errors import UsageError

    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: give 1 or more worker processes.")
    started = time.perf_counter()
    wanted, groups, classes = plan(args.model_types, every=args.all, groups=args.group)
    rows = []
    in_order = (
        sweep_in_processes(wanted, classes, args.jobs) if args.jobs > 1 else sweep(wanted, classes)
    )
    out = sys.stdout
    # what model code prints (Reformer's "Warning: ... is not a recognized input") goes to
    # stderr: stdout holds the rows and the report alone, so that --json parses
    with contextlib.redirect_stdout(sys.stderr):
        for row in in_order:
            rows.append(row)
            if not args.json:  # stream: a full sweep takes minutes
                status = "PASS" if row.ok else "FAIL" if not row.needs else "NEED"
                print(
                    f"{status} {groups.get(row.model_type, '?'):10s} "
                    f"{row.model_type:32s} {row.weight_bytes:>10,} B {row.seconds:6.2f}s"
                    + ("" if row.ok else f"  {_apart(row)}{row.reason}"),
                    file=out,
                    flush=True,
                )
    summary = summarize(rows, groups, wall_seconds=time.perf_counter() - started)
    emit(summary, args.json, "\n".join(summary_lines(summary)))
    return 0


def _apart(row: CoverageRow) -> str:
    """The tag before a row's reason: set apart as transformers' failure, or for a package."""
    return "[upstream] " if row.upstream else f"[needs {row.needs}] " if row.needs else ""
