"""`tinykit record -o DIR -- CMD`: record every model a command runs, without changing its code
(adapter over tinykit.numerics.attach.record_command)."""

from __future__ import annotations

import argparse
import sys

from tinykit.cli import emit
from tinykit.cli._args import count, split_command, timeout_option

EXAMPLES = [
    "tinykit record -o run-a -- python train.py --steps 3",
    "tinykit record -o run-b --tensors full --modules 'model.layers.*' -- python train.py",
    "tinykit record -o resumed --first-step 4 -- python train.py --resume ckpt-4",
    "tinykit dumps diff run-a run-b",
]


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--out", metavar="DIR", help="the dump folder to write (new; required)")
    p.add_argument("--modules", default="*", metavar="GLOB", help="modules to record (default *)")
    p.add_argument(
        "--what",
        default="input,output,grad,step",
        metavar="A,B",
        help="any of input, output, grad, param, step (default input,output,grad,step)",
    )
    p.add_argument("--steps", metavar="A,B", help="record only these steps (default: all)")
    p.add_argument(
        "--tensors",
        choices=("stats", "full"),
        default="stats",
        help="stats (default) or full tensors too",
    )
    p.add_argument("--max-bytes", type=count(1, 1 << 50), metavar="N", help="bound the dump's size")
    p.add_argument(
        "--first-step",
        type=count(0, 1 << 40),
        default=0,
        metavar="N",
        help="number the steps from N (a resumed run, to line up with the uninterrupted one)",
    )
    # SIGINT: the recording processes still write their dumps
    timeout_option(p, "CMD (exit 124, as timeout(1))", stop="SIGINT")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def register(sub: argparse._SubParsersAction) -> None:
    opts = argparse.ArgumentParser(add_help=False, prog="tinykit record")
    _options(opts)
    p = sub.add_parser(
        "record",
        parents=[opts],
        help="run CMD and record every model it runs into a dump (no change to its code)",
        description="Run CMD with every Python process in it recorded as tinykit.record(out=DIR) "
        "records (the first root module with parameters is the model), starting when the "
        "process imports torch. One recording process gives the dump DIR; several give "
        "DIR/process-N. CMD's output passes through; exits with CMD's exit code.",
        epilog="examples:\n  " + "\n  ".join(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command")
    p.set_defaults(func=run, options_parser=opts)


def run(args: argparse.Namespace) -> int:
    from tinykit._procs import TIMED_OUT
    from tinykit.cli._args import comma_list
    from tinykit.errors import UsageError
    from tinykit.numerics.attach import record_command

    cmd = split_command(args)
    if not args.out:
        raise UsageError(f"-o DIR is required: the dump folder to write. Example: {EXAMPLES[0]}")
    if not cmd:
        raise UsageError(f"no command to record. Put it after --, e.g. {EXAMPLES[0]}")
    steps = comma_list(args.steps)
    if steps is not None and not all(s.isdigit() for s in steps):
        raise UsageError(f"--steps {args.steps!r}: give step numbers, e.g. --steps 0,1,5")
    result = record_command(
        cmd,
        args.out,
        modules=args.modules,
        what=comma_list(args.what) or [],
        steps=None if steps is None else [int(s) for s in steps],
        tensors=args.tensors,
        max_bytes=args.max_bytes,
        first_step=args.first_step,
        timeout=args.timeout,
    )
    if not result.dumps and result.exit_code == 0:
        raise UsageError(
            "the command ran no torch module in any Python process: nothing was recorded (a "
            "Python started with -S or -I skips the hook). Check that CMD runs the model."
        )
    where = ", ".join(map(str, result.dumps)) or "none (no process of the command ran a model)"
    ended = f"exit {result.exit_code}" if result.exit_code is not None else "timed out"
    print(f"tinykit: record: {ended}; dumps: {where}", file=sys.stderr)
    if args.json:
        emit(
            {
                "exit_code": result.exit_code,
                "dumps": [str(d) for d in result.dumps],
                "seconds": result.seconds,
            },
            True,
            "",
        )
    return result.exit_code if result.exit_code is not None else TIMED_OUT
