"""Distributed tests on CPU (gloo) and GPUs (NCCL): launch ranks, warm pools, emulated nodes,
rank faults on purpose, whole programs under torchrun, helpers, health check.

Nothing here imports torch until a function is called.
"""

from __future__ import annotations

from tinykit.distributed.check import check_locally, check_rank
from tinykit.distributed.faults import Fault, fail, fault_point
from tinykit.distributed.helpers import (
    RankInfo,
    assert_equal_on_all_ranks,
    print_rank,
    rank_zero_first,
)
from tinykit.distributed.launch import resolve_backend, run_distributed
from tinykit.distributed.nodes import NodeLayout
from tinykit.distributed.pool import PoolRegistry, RankPool
from tinykit.distributed.ports import free_port
from tinykit.distributed.torchrun import TorchrunJob, run_torchrun

__all__ = [
    "Fault",
    "NodeLayout",
    "PoolRegistry",
    "RankInfo",
    "RankPool",
    "TorchrunJob",
    "assert_equal_on_all_ranks",
    "check_locally",
    "check_rank",
    "fail",
    "fault_point",
    "free_port",
    "print_rank",
    "rank_zero_first",
    "resolve_backend",
    "run_distributed",
    "run_torchrun",
]
