"""The cluster health check (`tinykit dist-check`): can every rank allocate, all-reduce and barrier?

The field's version is Stas Bekman's `torch-distributed-gpu-test.py` (ML Engineering book,
debug/): NCCL and CUDA only, and a broken peer hangs it for NCCL's 10-minute default. This one
uses gloo when there are no GPUs, a short process-group timeout, and gathers one report per rank
on rank 0. Run it in every rank (torchrun), or let `check_locally` start the ranks.

    torchrun --nproc-per-node 2 -m tinykit dist-check
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29400 \
        -m tinykit dist-check
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta
from typing import Any

from tinykit.errors import CheckFailed, UsageError

RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


def launched_by_torchrun() -> bool:
    return all(v in os.environ for v in RANK_VARS)


def _versions(torch: Any, backend: str) -> dict[str, Any]:
    info: dict[str, Any] = {"torch": torch.__version__, "backend": backend}
    if backend == "nccl":
        major, minor = torch.cuda.get_device_capability()
        info |= {
            "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "capability": f"{major}.{minor}",
            "arch_list": torch.cuda.get_arch_list(),
        }
    return info


def check_rank(backend: str = "auto", timeout: float = 60.0) -> dict[str, Any]:
    """Run the check in this rank (RANK, LOCAL_RANK, WORLD_SIZE and the rendezvous set by torchrun).

    Initialises the process group unless one exists, allocates a tensor on this rank's device,
    all-reduces ones (the sum must equal the world size), barriers, and gathers every rank's
    report on rank 0.

    Returns:
        `{"ok": True, "world_size", "ranks": [per-rank dict, ...], "versions"}` on rank 0 and
        `{"ok": True, "ranks": [this rank's dict]}` elsewhere.

    Raises:
        CheckFailed: the all-reduce sum is wrong (every rank raises).
        UsageError: not launched by torchrun (RANK/LOCAL_RANK/WORLD_SIZE missing).
    """
    if not launched_by_torchrun():
        raise UsageError(
            "check_rank() runs inside a rank: RANK, LOCAL_RANK and WORLD_SIZE are not set. "
            "Launch it with `torchrun --nproc-per-node 2 -m tinykit dist-check`, or run "
            "`tinykit dist-check --nproc 2` to start local ranks."
        )
    import torch
    import torch.distributed as dist

    from tinykit.distributed.launch import resolve_backend

    local_rank = int(os.environ["LOCAL_RANK"])
    if backend == "auto":
        # torchrun has placed LOCAL_WORLD_SIZE ranks on this node; each needs its own GPU
        backend = resolve_backend("auto", int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    started = time.monotonic()
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    created = not dist.is_initialized()  # a group we start, we also end (a clean exit)
    try:
        if created:
            dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
        ones = torch.ones(1, device=device)  # the allocation check
        dist.all_reduce(ones)
        total = ones.item()
        dist.barrier()
    except (RuntimeError, ValueError) as e:  # DistBackendError/DistNetworkError are RuntimeErrors
        raise CheckFailed(
            f"Rank {os.environ['RANK']} ({socket.gethostname()}:{local_rank}, {backend}) is "
            "broken: "
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} (it may also be a "
            f"peer that did not answer within {timeout:g} s). Rerun with NCCL_DEBUG=INFO or "
            "TORCH_DISTRIBUTED_DEBUG=DETAIL, try NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME, and check "
            "that the rendezvous port is open on the first node (nc -zv HOST PORT)."
        ) from e
    rank, world = dist.get_rank(), dist.get_world_size()
    me = {
        "rank": rank,
        "local_rank": local_rank,
        "host": socket.gethostname(),
        "node_rank": int(os.environ.get("GROUP_RANK", os.environ.get("NODE_RANK", "0"))),
        "device": str(device),
        "all_reduce": total,
        "seconds": round(time.monotonic() - started, 3),
    }
    reports: list[Any] = [None] * world
    dist.all_gather_object(reports, me)
    if created:
        dist.destroy_process_group()
    bad = [r for r in reports if r["all_reduce"] != world]
    if bad:
        listing = ", ".join(f"rank {r['rank']}: {r['all_reduce']:g}" for r in bad)
        raise CheckFailed(
            f"all_reduce of ones over {world} ranks ({backend}) gave the wrong sum: {listing} "
            f"(expected {world}). A rank or link is broken; rerun with NCCL_DEBUG=INFO (or "
            "TORCH_DISTRIBUTED_DEBUG=DETAIL for gloo) and test GPU pairs with CUDA_VISIBLE_DEVICES."
        )
    if rank != 0:
        return {"ok": True, "ranks": [me]}
    versions = _versions(torch, backend)
    return {"ok": True, "world_size": world, "ranks": reports, "versions": versions}


def _check_in_rank(backend: str, timeout: float) -> dict[str, Any]:
    return check_rank(backend, timeout)


def check_locally(
    nproc: int = 2, backend: str = "auto", timeout: float = 60.0, *, nodes: int = 1
) -> dict[str, Any]:
    """Start `nproc` local ranks and return rank 0's report: tinykit's rank pool for one node,
    one real torchrun agent per emulated node for `nodes` > 1 (`run_torchrun`)."""
    from tinykit.distributed.launch import resolve_backend, run_distributed
    from tinykit.errors import DistributedTestFailed

    if nodes > 1:
        return _check_on_nodes(nodes, nproc, backend, timeout)
    backend = resolve_backend(backend, nproc)
    try:
        results = run_distributed(
            _check_in_rank,
            args=(backend, timeout),
            world_size=nproc,
            backend=backend,
            timeout=timeout,
            fresh=True,
            name="dist-check",
        )
    except DistributedTestFailed as e:
        # one line: which rank, and what to do; the ranks' tracebacks stay on the cause (--debug)
        head, advice = (str(e).splitlines() + [""])[:2]
        raise DistributedTestFailed(
            f"{head} {advice} Rerun with --debug for every rank's traceback and output.",
            per_rank=e.per_rank,
            timed_out=e.timed_out,
        ) from e
    return results[0]


def _check_on_nodes(nodes: int, nproc: int, backend: str, timeout: float) -> dict[str, Any]:
    import json
    import sys

    from tinykit.distributed.torchrun import run_torchrun
    from tinykit.errors import DistributedTestFailed

    command = [sys.executable, "-m", "tinykit", "dist-check", "--json"]
    command += ["--backend", backend, "--timeout", f"{timeout:g}"]
    # the time limit adds the start-up of every agent and worker (each imports torch)
    job = run_torchrun(
        command, nodes=nodes, nproc_per_node=nproc, timeout=timeout + 180, echo=False, check=False
    )
    if job.returncode or job.timed_out:
        tail = "\n".join(text for _, _, text in job.lines[-60:])
        cause = DistributedTestFailed(f"dist-check output (last lines):\n{tail}", per_rank=[])
        state = "timed out" if job.timed_out else f"failed (exit code {job.returncode})"
        raise DistributedTestFailed(
            f"dist-check on {job.layout} (torchrun) {state}. Rerun with --debug for the ranks' "
            "output, or run `tinykit launch` with the same layout to watch it live.",
            per_rank=[],
            timed_out=job.timed_out,
        ) from cause
    return dict(json.loads("\n".join(job.rank_lines(0))))


def format_report(report: dict[str, Any]) -> str:
    """One line per rank in the book's shape, then the versions (rank 0)."""
    lines = [
        f"[{r['host']}:{r['local_rank']}] is OK (global rank: {r['rank']}/"
        f"{report.get('world_size', '?')}, node {r['node_rank']}, {r['device']}, {r['seconds']} s)"
        for r in report["ranks"]
    ]
    if "versions" in report:
        lines.append(" ".join(f"{k}={v}" for k, v in report["versions"].items()))
    return "\n".join(lines)
