"""Distributed tests on CPU (gloo) and GPUs (NCCL): launch ranks, warm pools, helpers, health check.

Nothing here imports torch until a function is called.
"""

from __future__ import annotations

from tinykit.dist.check import check_locally, check_rank
from tinykit.dist.helpers import RankInfo, assert_equal_on_all_ranks, print_rank, rank_zero_first
from tinykit.dist.launch import resolve_backend, run_distributed
from tinykit.dist.pool import PoolRegistry, RankPool
from tinykit.dist.ports import free_port

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
