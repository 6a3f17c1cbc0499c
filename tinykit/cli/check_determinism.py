"""`tinykit check-determinism module:function`: run it twice, name the first divergence."""

from __future__ import annotations

import argparse
import dataclasses

from tinykit.cli import emit
from tinykit.cli._args import FUNCTION_TIMEOUT, count, seconds
from tinykit.errors import TinykitError, UsageError

EXAMPLES = [
    "tinykit check-determinism mypkg.train:two_steps",
    "tinykit check-determinism scripts/step.py:train_step --mode inprocess --runs 3",
    "tinykit check-determinism mypkg.train:two_steps --atol 1e-6 --deterministic --json",
]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check-determinism",
        help="run a zero-argument function twice under one seed; name the first diverging module",
        epilog="examples:\n  " + "\n  ".join(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "fn",
        metavar="MODULE:FUNCTION",
        help="the function: 'package.module:function' or 'path/file.py:function'",
    )
    p.add_argument(
        "--runs", type=count(2, 100), default=2, help="how many runs to compare (default 2)"
    )
    p.add_argument(
        "--mode",
        choices=("process", "inprocess"),
        default="process",
        help="fresh interpreter per run (default) or all runs in this process",
    )
    p.add_argument(
        "--atol", type=float, default=0.0, help="absolute tolerance; 0 (default) compares bitwise"
    )
    p.add_argument("--seed", type=int, default=0, help="seed for every run (default 0)")
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="also enable torch deterministic algorithms in each run",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        default=FUNCTION_TIMEOUT,
        metavar="SECONDS",
        help="stop the runs when they take longer and fail: process mode kills them, "
        f"inprocess mode interrupts them (default {FUNCTION_TIMEOUT:g}; at most 86400)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinykit.numerics.determinism import check_determinism

    try:
        report = check_determinism(
            args.fn,
            runs=args.runs,
            mode=args.mode,
            atol=args.atol,
            seed=args.seed,
            deterministic=args.deterministic,
            timeout=args.timeout,
        )
    except TinykitError:
        raise
    except Exception as e:  # the API re-raises the function's own error; here it is one line
        first = next((line for line in str(e).splitlines() if line.strip()), "no message")
        raise UsageError(
            f"{args.fn} raised {type(e).__name__}: {first.strip()}. Fix the function "
            "(TINYKIT_DEBUG=1 shows the traceback)."
        ) from e
    text = (
        f"deterministic: {report.runs} runs of {report.fn} matched "
        f"({'bitwise' if not report.atol else f'atol={report.atol}'}; {report.records} records "
        f"from {report.modules} modules; seed={report.seed}, mode={report.mode}; "
        f"run seconds {report.seconds})"
    )
    emit(dataclasses.asdict(report), args.json, text)
    return 0
