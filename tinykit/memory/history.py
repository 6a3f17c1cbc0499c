"""Bounded CUDA memory history and one snapshot file per rank, for PyTorch's memory viewer.

    with memory_history(max_entries=100_000) as h:     # python stacks only, bounded
        for _ in range(3):                              # >= 2 steps: the first is an outlier
            train_step()
        h.dump("mem-{rank}.pickle")                     # drag into https://pytorch.org/memory_viz

PyTorch's `_record_memory_history` keeps `max_entries` allocation events (its default is
unbounded, and snapshots over ~500 MB make the viewer lag) and, with stacks="all", C++ stacks
that are slow to symbolize: the defaults here are python stacks and 100,000 entries. Ranks that
write one file race and produce a garbage profile, so the file name holds the rank.
Without CUDA in use (CPU-only torch, or CUDA never initialised) everything here is a no-op and
`.reason` says why. These paths need a GPU and are untested on CPU-only machines.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

from tinykit.errors import UsageError

__all__ = ["MemoryHistory", "dump_snapshot", "memory_history", "rank_path"]

DEFAULT_MAX_ENTRIES = 100_000
log = logging.getLogger("tinykit._progress")


def _rank() -> tuple[int, int]:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def rank_path(template: str | os.PathLike[str]) -> Path:
    """`template` with {rank} filled in; under several ranks the template must contain it."""
    text = str(template)
    rank, world = _rank()
    if "{rank}" not in text:
        if world > 1:
            raise UsageError(
                f"snapshot path {text!r} has no {{rank}} while {world} ranks run: ranks writing "
                "one file race and leave a garbage profile. Use e.g. 'mem-{rank}.pickle'."
            )
        return Path(text)
    return Path(text.format(rank=rank))


def _cuda_reason() -> str | None:
    """Why CUDA history cannot be recorded here, or None when it can."""
    torch = sys.modules.get("torch")
    if torch is None:
        return "torch is not imported, so no CUDA memory is in use"
    if not torch.cuda.is_available():
        return "no CUDA device (CPU-only torch or no GPU visible)"
    if not torch.cuda.is_initialized():
        return "CUDA is not initialised by this process yet (tinykit never initialises it)"
    return None


class MemoryHistory:
    """A recording of CUDA allocation events; `.active` is False (with `.reason`) off CUDA."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, stacks: str = "python") -> None:
        if max_entries < 1:
            raise UsageError(f"max_entries {max_entries}: record at least 1 event.")
        if stacks not in ("python", "all"):
            raise UsageError(f"stacks {stacks!r}: use 'python' (fast) or 'all' (adds C++).")
        self.max_entries, self.stacks = max_entries, stacks
        self.reason = _cuda_reason()
        self.active = False

    def start(self) -> MemoryHistory:
        if self.reason is not None:
            log.info("tinykit: memory history is off: %s", self.reason)
            return self
        import torch

        torch.cuda.memory._record_memory_history(max_entries=self.max_entries, stacks=self.stacks)
        self.active = True
        return self

    def dump(self, template: str | os.PathLike[str] = "mem-{rank}.pickle") -> Path | None:
        """Write this rank's snapshot (None when not recording). Returns the path written."""
        return dump_snapshot(template) if self.active else None

    def stop(self) -> None:
        if self.active:
            import torch

            torch.cuda.memory._record_memory_history(enabled=None)
            self.active = False

    def __enter__(self) -> MemoryHistory:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def memory_history(max_entries: int = DEFAULT_MAX_ENTRIES, stacks: str = "python") -> MemoryHistory:
    """Record bounded CUDA memory history inside a `with` block (a no-op without CUDA)."""
    return MemoryHistory(max_entries, stacks)


def dump_snapshot(template: str | os.PathLike[str] = "mem-{rank}.pickle") -> Path | None:
    """Write the CUDA memory snapshot of this rank to `template` ({rank} filled in), atomically.

    Returns None (and logs why) when CUDA is not in use.
    """
    if (reason := _cuda_reason()) is not None:
        log.info("tinykit: no memory snapshot written: %s", reason)
        return None
    import pickle

    import torch

    path = rank_path(template)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial")
    snapshot: Any = torch.cuda.memory._snapshot()
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: tmp.unlink(missing_ok=True))
        tmp.write_bytes(pickle.dumps(snapshot))
        tmp.replace(path)
    return path
