"""`tinykit launch`: run a program on emulated nodes, one real torchrun agent per node.

Every node is `torchrun --nnodes N --nproc-per-node P` with c10d rendezvous on 127.0.0.1 and its
own local folder (TMPDIR, HF_HOME, $TINYKIT_NODE_DIR) beside one shared folder
($TINYKIT_SHARED_DIR); output lines come back as "[node1 rank3] ...". No ssh, no hostfile.
"""

from __future__ import annotations

import argparse

from tinykit.cli._args import OneLineParser, count, seconds, split_command

EXAMPLES = [
    "tinykit launch -- python train.py --steps 10",
    "tinykit launch --nodes 2 --nproc-per-node 2 --max-restarts 1 --fail rank=1,at=3 "
    "-- python train.py",
    "tinykit launch --nodes 2 --nproc-per-node 1 -- python -m tinykit dist-check",
]


def _fault(text: str) -> object:
    from tinykit.distributed.faults import Fault
    from tinykit.errors import UsageError

    try:
        return Fault.parse(text)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e).rstrip(".")) from None


def register(sub: argparse._SubParsersAction) -> None:
    opts = OneLineParser(add_help=False, prog="tinykit launch")
    opts.add_argument(
        "--nodes",
        type=count(1, 8),
        default=2,
        metavar="N",
        help="emulated nodes, one torchrun agent each (default 2)",
    )
    opts.add_argument(
        "--nproc-per-node", type=count(1, 64), default=2, metavar="P", help="ranks per node (2)"
    )
    opts.add_argument(
        "--max-restarts",
        type=count(0, 100),
        default=0,
        metavar="R",
        help="torchrun's elastic restarts per node after a failure (default 0)",
    )
    opts.add_argument(
        "--timeout",
        type=seconds,
        default=600.0,
        metavar="SECONDS",
        help="time limit of the whole job; then every worker prints its Python stacks and the "
        "job is killed (default 600)",
    )
    opts.add_argument(
        "--fail",
        type=_fault,
        metavar="rank=R,at=STEP",
        help="kill rank R when it calls tinykit.distributed.fault_point(STEP) (at=barrier:N: at "
        "its Nth barrier; how=raise raises instead; attempt=K fires in restart K, default 0)",
    )
    opts.add_argument(
        "--workdir",
        metavar="DIR",
        help="where shared/ and node<i>/ go, kept after the job (default: a temporary folder)",
    )
    p = sub.add_parser(
        "launch",
        parents=[opts],
        help="run a program on emulated nodes: one real torchrun agent per node, node-local folders",
        description=__doc__,
        epilog="examples:\n  " + "\n  ".join(EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the program")
    p.set_defaults(func=run, options_parser=opts)


def run(args: argparse.Namespace) -> int:
    from tinykit.distributed.torchrun import run_torchrun
    from tinykit.errors import UsageError

    cmd = split_command(args)
    if not cmd:
        raise UsageError(f"no program to launch. Put it after --, e.g. {EXAMPLES[0]}")
    run_torchrun(
        cmd,
        nodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        max_restarts=args.max_restarts,
        timeout=args.timeout,
        fault=args.fail,
        workdir=args.workdir,
    )
    return 0
