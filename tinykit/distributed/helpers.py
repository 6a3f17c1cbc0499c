"""Helpers for code running on ranks: all-ranks equality, rank 0 first (per job or per node),
rank-prefixed printing, and where this rank sits (its node, its node's local folder).

Each helper is collective where it must be (every rank calls it) and makes all ranks agree on
the verdict, so one rank never raises while the others block in the next collective.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinykit.distributed.nodes import NODE_DIR_VAR, SHARED_DIR_VAR
from tinykit.errors import CheckFailed, UsageError

if TYPE_CHECKING:
    import torch


class RankInfo:
    """This process's place in the job, read from the environment when asked (so it pickles).

    The `dist_env` fixture returns one; in a rank it reports that rank.
    """

    def _int(self, var: str, default: int) -> int:
        return int(os.environ.get(var, default))

    @property
    def rank(self) -> int:
        return self._int("RANK", 0)

    @property
    def local_rank(self) -> int:
        return self._int("LOCAL_RANK", 0)

    @property
    def world_size(self) -> int:
        return self._int("WORLD_SIZE", 1)

    @property
    def local_world_size(self) -> int:
        return self._int("LOCAL_WORLD_SIZE", self.world_size)

    @property
    def node_rank(self) -> int:
        """This rank's node (torchrun's GROUP_RANK)."""
        return self._int("GROUP_RANK", self._int("NODE_RANK", 0))

    @property
    def nodes(self) -> int:
        """Nodes in the job (torchrun's GROUP_WORLD_SIZE)."""
        return self._int("GROUP_WORLD_SIZE", 1)

    @property
    def node_dir(self) -> Path | None:
        """This node's local folder (emulated nodes only see their own); None outside tinykit."""
        return _path_of(NODE_DIR_VAR)

    @property
    def shared_dir(self) -> Path | None:
        """The folder every node sees (the shared filesystem); None outside tinykit."""
        return _path_of(SHARED_DIR_VAR)

    @property
    def restart(self) -> int:
        """How often torchrun restarted this rank's worker group (TORCHELASTIC_RESTART_COUNT)."""
        return self._int("TORCHELASTIC_RESTART_COUNT", 0)

    @property
    def device(self) -> torch.device:
        """cuda:LOCAL_RANK under NCCL, else cpu."""
        import torch
        import torch.distributed as dist

        if dist.is_initialized() and dist.get_backend() == "nccl":
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    def __repr__(self) -> str:
        return (
            f"RankInfo(rank={self.rank}, world_size={self.world_size}, node_rank={self.node_rank},"
            f" local_rank={self.local_rank})"
        )


def _path_of(var: str) -> Path | None:
    value = os.environ.get(var)
    return Path(value) if value else None


def _require_group() -> Any:
    import torch.distributed as dist

    if not dist.is_initialized():
        raise UsageError(
            "No torch.distributed process group is initialised in this process. Call this from "
            "code launched by tinykit.distributed.run_distributed / @pytest.mark.tinykit_dist / torchrun "
            "after init_process_group()."
        )
    return dist


def assert_equal_on_all_ranks(
    tensor: torch.Tensor, *, name: str = "tensor", rtol: float = 0.0, atol: float = 0.0
) -> None:
    """Check (collectively) that `tensor` has the same shape, dtype and values on every rank.

    Exact by default; pass rtol/atol for a tolerance. Every rank raises the same error.

    Raises:
        CheckFailed: the ranks disagree; the message names the ranks and the largest difference.
    """
    import torch

    dist = _require_group()
    world = dist.get_world_size()
    metas: list[Any] = [None] * world
    dist.all_gather_object(metas, (tuple(tensor.shape), str(tensor.dtype)))
    if len(set(metas)) > 1:
        listing = ", ".join(f"rank {r}: shape {s} {d}" for r, (s, d) in enumerate(metas))
        raise CheckFailed(
            f"{name} differs across ranks before any value is compared: {listing}. "
            "Every rank must pass a tensor of the same shape and dtype."
        )
    local = tensor.detach().contiguous()
    gathered = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(gathered, local)
    reference = gathered[0]
    bad = []
    for r, other in enumerate(gathered[1:], start=1):
        if not torch.allclose(other, reference, rtol=rtol, atol=atol, equal_nan=True):
            diff = (other.double() - reference.double()).abs().nan_to_num(float("inf")).max()
            bad.append(f"rank {r} max|Δ|={diff.item():.3g}")
    if bad:
        raise CheckFailed(
            f"{name} is not equal on all {world} ranks (rtol={rtol}, atol={atol}); against rank 0: "
            f"{'; '.join(bad)}. Look for rank-dependent seeds, unsynchronised gradients or data."
        )


@contextlib.contextmanager
def rank_zero_first(*, per_node: bool = False) -> Iterator[None]:
    """Run the block on rank 0 first, then on the other ranks (downloads, caches, datasets).

    `per_node=True`: on each node's local rank 0 first, then on that node's other ranks: what a
    cache on a node-local disk (HF_HOME, TMPDIR) needs, since the global rank 0 fills only its own
    node's. No collectives inside the block: the others wait in a collective until every first
    rank has left it. If a first rank fails inside, its followers raise instead of waiting forever.
    """
    dist = _require_group()
    info = RankInfo()
    rank = dist.get_rank()
    leader = rank - info.local_rank if per_node else 0
    verdicts: list[Any] = [None] * dist.get_world_size()
    if rank != leader:
        dist.all_gather_object(verdicts, None)
        if verdicts[leader] != "ok":
            scope = (
                f"local rank 0 of node {info.node_rank} (rank {leader})" if per_node else "rank 0"
            )
            raise CheckFailed(
                f"{scope} failed inside rank_zero_first ({verdicts[leader]}), so rank {rank} did "
                f"not run the block. Fix the error reported by rank {leader}."
            )
        yield
        return
    try:
        yield
    except BaseException as e:
        dist.all_gather_object(verdicts, f"{type(e).__name__}: {e}")
        raise
    dist.all_gather_object(verdicts, "ok")


def _lock_path() -> Path:
    return Path(tempfile.gettempdir()) / "tinykit-print.lock"


def print_rank(*values: Any, sep: str = " ", file: Any = None) -> None:
    """`print` with a "[rank N]" prefix, one whole line per call even with many ranks on a host.

    The write happens under an exclusive file lock (the `printflock` idea from Stas Bekman's
    ML Engineering book), so lines of different ranks never interleave mid-line.
    """
    from filelock import FileLock

    rank = os.environ.get("RANK", "0")
    text = sep.join(str(v) for v in values)
    prefixed = "\n".join(f"[rank {rank}] {line}" for line in text.split("\n"))
    out = file or sys.stdout
    with FileLock(str(_lock_path())):
        print(prefixed, file=out, flush=True)
