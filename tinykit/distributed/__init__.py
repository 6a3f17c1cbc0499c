"""Distributed tests on CPU (gloo) and GPUs (NCCL): launch ranks, warm pools, helpers, health check.

Nothing here imports torch until a function is called.
"""

from __future__ import annotations

from tinykit.distributed.check import check_locally, check_rank
from tinykit.distributed.helpers import (
    RankInfo,
    assert_equal_on_all_ranks,
    print_rank,
    rank_zero_first,
)
from tinykit.distributed.launch import resolve_backend, run_distributed
from tinykit.distributed.pool import PoolRegistry, RankPool
from tinykit.distributed.ports import free_port

__all__ = [
    "PoolRegistry",
    "RankInfo",
    "RankPool",
    "assert_equal_on_all_ranks",
    "check_locally",
    "check_rank",
    "free_port",
    "print_rank",
    "rank_zero_first",
    "resolve_backend",
    "run_distributed",
]
