"""`tinykit dist-check`: can every rank allocate, all-reduce and barrier? One report line per rank.

    torchrun --nproc-per-node 2 -m tinykit dist-check            # one node
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29400 -m tinykit dist-check          # run on every node
    tinykit dist-check --nproc 2                                  # no torchrun: local ranks
    tinykit dist-check --nodes 2 --nproc 2                        # 2 emulated nodes (torchrun)
"""

from __future__ import annotations

import argparse

from tinykit.cli import emit
from tinykit.cli._args import count, seconds


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dist-check",
        help="distributed health check: allocate, all_reduce and barrier on every rank",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--backend",
        choices=["auto", "gloo", "nccl"],
        default="auto",
        help="auto: NCCL when every local rank has a GPU, else gloo (default)",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        default=60.0,
        metavar="SECONDS",
        help="process-group timeout: a silent peer fails the check after it (default 60)",
    )
    p.add_argument(
        "--nproc",
        type=count(1, 64),
        default=2,
        metavar="N",
        help="ranks (per node) to start when not launched by torchrun (default 2)",
    )
    p.add_argument(
        "--nodes",
        type=count(1, 8),
        default=1,
        metavar="N",
        help="emulated nodes when not launched by torchrun: one real torchrun agent per node, "
        "--nproc ranks each (default 1: tinykit's own ranks)",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON (rank 0 only)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinykit.distributed.check import (
        check_locally,
        check_rank,
        format_report,
        launched_by_torchrun,
    )

    if launched_by_torchrun():
        report = check_rank(args.backend, args.timeout)
        if args.json and "world_size" not in report:
            return 0  # only rank 0 prints JSON, so the output parses
    else:
        report = check_locally(args.nproc, args.backend, args.timeout, nodes=args.nodes)
    emit(report, args.json, format_report(report))
    return 0
