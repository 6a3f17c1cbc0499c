"""Helpers for code running on ranks: all-ranks equality, rank 0 first, rank-prefixed printing.

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
    def device(self) -> torch.device:
        """cuda:LOCAL_RANK under NCCL, else cpu."""
        import torch
        import torch.distributed as dist

        if dist.is_initialized() and dist.get_backend() == "nccl":
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    def __repr__(self) -> str:
        return f"RankInfo(rank={self.rank}, world_size={self.world_size})"


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
def rank_zero_first() -> Iterator[None]:
    """Run the block on rank 0, then on the other ranks (downloads, caches, dataset preparation).

    No collectives inside the block: the other ranks wait in a broadcast until rank 0 leaves it.
    If rank 0 fails inside, the others raise instead of waiting forever.
    """
    dist = _require_group()
    rank = dist.get_rank()
    if rank != 0:
        verdict = [None]
        dist.broadcast_object_list(verdict, src=0)
        if verdict[0] != "ok":
            raise CheckFailed(
                f"rank 0 failed inside rank_zero_first ({verdict[0]}), so rank {rank} did not "
                "run the block. Fix the error reported by rank 0."
            )
        yield
        return
    try:
        yield
    except BaseException as e:
        dist.broadcast_object_list([f"{type(e).__name__}: {e}"], src=0)
        raise
    dist.broadcast_object_list(["ok"], src=0)


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
