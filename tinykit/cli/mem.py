"""`tinykit mem run|project`: peak memory of a command tree; full-depth projections
(adapter over tinykit.memory.run and tinykit.memory.project)."""

from __future__ import annotations

import argparse
import sys

from tinykit.cli import emit
from tinykit.cli._args import OneLineParser, count, split_command, timeout_option

EXAMPLES = [
    "tinykit mem run -- python train.py --steps 10",
    "tinykit mem run --plot mem.png --json -- torchrun --nproc-per-node 2 train.py",
    "tinykit mem project facebook/opt-125m --seq 512 --dtype bfloat16 --train --optimizer adamw",
]


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plot", metavar="FILE.png", help="write a timeline of the tree's RSS")
    p.add_argument("--force", action="store_true", help="replace FILE.png if it exists")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument(
        "--interval",
        type=float,
        default=0.01,
        metavar="S",
        help="seconds between samples of the process tree (default 0.01)",
    )
    timeout_option(p, "CMD (exit 124, as timeout(1))")


def _layers(text: str) -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not two depths: write them as LO,HI, e.g. 1,2"
        ) from None
    if not 1 <= lo < hi <= 64:
        raise argparse.ArgumentTypeError(f"{text}: use 1 <= LO < HI <= 64, e.g. 1,2")
    return lo, hi


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "mem",
        help="peak memory of a command (all its children), and full-depth projections",
        epilog="examples:\n  " + "\n  ".join(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="mem_command", metavar="ACTION", required=True)
    opts = OneLineParser(add_help=False, prog="tinykit mem run")
    _run_options(opts)
    r = actions.add_parser(
        "run",
        parents=[opts],
        help="run CMD and report the peak memory of it and every child and grandchild",
        description="Run CMD (its output passes through) and report the peak RSS of its whole "
        "process tree on stderr: sampled, and the kernel's max RSS of every process waited for. "
        "CMD runs in its own process group: Ctrl-C, SIGTERM and --timeout end all of it. Exits "
        "with CMD's exit code, as a shell reports it (128+N when a signal N killed it).",
    )
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command")
    r.set_defaults(func=run_command, options_parser=opts)
    p = actions.add_parser(
        "project",
        help="project a model's full-depth peak memory from builds with 1 and 2 layers",
        description="Build SOURCE at its real width with few layers (random weights, no "
        "download; every block type kept), measure the peak of a forward pass (or of training "
        "steps with --train) in a fresh process per depth, fit a fixed and a per-layer cost per "
        "block type, and project the full depth, beside the analytic weight, gradient and "
        "optimizer-state bytes. Host memory on CPU, device memory on a GPU.",
    )
    p.add_argument("source", help="a folder with config.json, a model_type or a Hub id")
    p.add_argument("--layers", type=_layers, default=(1, 2), metavar="LO,HI", help="depths (1,2)")
    p.add_argument("--seq", type=count(1, 1_000_000), default=512, help="tokens per row (512)")
    p.add_argument("--batch", type=count(1, 65_536), default=1, help="rows (1)")
    p.add_argument(
        "--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16", help="(bfloat16)"
    )
    p.add_argument("--train", action="store_true", help="measure training steps, not a forward")
    p.add_argument(
        "--optimizer", choices=["adamw", "adam", "sgd"], default="adamw", help="with --train"
    )
    p.add_argument(
        "--full", action="store_true", help="also measure the full depth (it must fit) and compare"
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run_project)


def run_command(args: argparse.Namespace) -> int:
    from tinykit.errors import UsageError
    from tinykit.memory.run import check_plot_path, plot_timeline
    from tinykit.memory.run import run_command as measure

    cmd = split_command(args)
    if not cmd:
        raise UsageError(f"no command to measure. Put it after --, e.g. {EXAMPLES[0]}")
    if args.plot:
        check_plot_path(args.plot, force=args.force)  # before the command runs, not after
    result = measure(cmd, interval=args.interval, timeout=args.timeout)
    print(f"tinykit: mem run: {result.summary()}", file=sys.stderr)
    if args.plot:
        out = plot_timeline(result.samples, args.plot, " ".join(cmd), result.peak)
        print(f"tinykit: mem run: timeline written to {out}", file=sys.stderr)
    if args.json:
        emit(result.to_dict(), True, "")
    return result.returncode


def run_project(args: argparse.Namespace) -> int:
    from tinykit.memory.project import project_memory

    result = project_memory(
        args.source,
        layers=args.layers,
        seq=args.seq,
        batch=args.batch,
        dtype=args.dtype,
        train=args.train,
        optimizer=args.optimizer,
        full=args.full,
    )
    emit(result.to_dict(), args.json, result.summary())
    return 0
