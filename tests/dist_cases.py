"""Code that runs on ranks in the multi-node and fault tests: on pool ranks (imported by name),
or as a program under torchrun (`python tests/dist_cases.py CASE ARGS`).

Each bug class has a buggy and a fixed variant; the tests check that the buggy one fails.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tinykit.distributed import RankInfo, fault_point, rank_zero_first

STEPS = 6
LAYOUT_VARS = (
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "NODE_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "LOCAL_WORLD_SIZE",
    "WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE",
)


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


# ---- (a) a checkpoint on a node-local disk: who writes it --------------------------------------


def save_then_load_on_each_node(writer: str) -> int:
    """Every rank loads `ckpt.pt` from its node's local folder after one rank per node (fixed:
    local rank 0) or one rank per job (buggy: global rank 0) wrote it."""
    info = RankInfo()
    assert info.node_dir is not None
    path = info.node_dir / "ckpt.pt"
    if (info.local_rank if writer == "local" else info.rank) == 0:
        torch.save(tiny_model().state_dict(), path)
    dist.barrier()
    torch.load(path)  # buggy: FileNotFoundError on node 1, which has no global rank 0
    return info.node_rank


def save_once_on_shared_disk(writer: str) -> int:
    """The reverse: one writer per job on the shared folder (fixed: global rank 0) vs one per
    node (buggy: local rank 0), with an exclusive create that catches the second writer."""
    info = RankInfo()
    assert info.shared_dir is not None
    if (info.rank if writer == "global" else info.local_rank) == 0:
        with open(info.shared_dir / "ckpt.pt", "xb") as f:  # buggy: FileExistsError on one node
            torch.save(tiny_model().state_dict(), f)
    dist.barrier()
    return info.node_rank


# ---- (b) a download into a node-local cache: main process first per node or per job -----------


def cached_download(url: str, per_node: bool) -> int:
    """The first rank downloads `url` into its node's HF_HOME, then the others read it from
    their node's cache (they never download: that is what a first rank is for). Fixed:
    per_node=True, a first rank on every node. Buggy: the global rank 0 only, so node 1's ranks
    find an empty cache: one download in all instead of one per node."""
    info = RankInfo()
    cache = Path(os.environ["HF_HOME"]) / "weights.bin"
    first = (info.local_rank if per_node else info.rank) == 0
    with rank_zero_first(per_node=per_node):
        if first:
            part = cache.with_name("weights.bin.part")
            urllib.request.urlretrieve(f"{url}?node={info.node_rank}&rank={info.rank}", part)
            os.replace(part, cache)
        return len(cache.read_bytes())  # buggy: FileNotFoundError on node 1


# ---- (c) resume after a killed rank -----------------------------------------------------------


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1000 * step + rank))
    return x, x.sum(dim=1, keepdim=True)


def train(ckpt_dir: str, resume: str = "fixed", steps: int = STEPS) -> dict[str, torch.Tensor]:
    """DDP training that checkpoints every step on global rank 0 (shared folder) and resumes from
    the last checkpoint. Buggy resume: the optimizer's momentum is not restored."""
    rank = dist.get_rank()
    model = DistributedDataParallel(tiny_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    last = Path(ckpt_dir) / "last.pt"
    start = 0
    if last.exists():
        state = torch.load(last)
        model.module.load_state_dict(state["model"])
        if resume == "fixed":
            opt.load_state_dict(state["opt"])
        start = state["step"] + 1
        print(f"resumed at step {start} (restart {RankInfo().restart})", flush=True)
    for step in range(start, steps):
        fault_point(step)
        x, y = batch(step, rank)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            state = {"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}
            torch.save(state, last.with_suffix(".tmp"))
            os.replace(last.with_suffix(".tmp"), last)  # a killed writer leaves the old one
        dist.barrier()
    weights = {k: v.detach().clone() for k, v in model.module.state_dict().items()}
    if rank == 0:
        torch.save(weights, Path(ckpt_dir) / "final.pt")
    return weights


def train_in_one_process(steps: int = STEPS, world_size: int = 4) -> dict[str, torch.Tensor]:
    """What `train` on `world_size` DDP ranks computes, uninterrupted, in this process: DDP
    averages the ranks' gradients, which is the gradient of the loss over all their batches."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        parts = [batch(step, rank) for rank in range(world_size)]
        x, y = torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# ---- under torchrun -----------------------------------------------------------------------------


def layout() -> dict[str, str]:
    """What this rank sees: the torchrun variables, its folders, and the mark its node's local
    rank 0 left in the node folder (another node's mark never lands there)."""
    info = RankInfo()
    assert info.node_dir is not None and info.shared_dir is not None
    if info.local_rank == 0:
        (info.node_dir / "mark").write_text(str(info.node_rank))
    dist.barrier()
    return {
        **{k: os.environ.get(k, "") for k in LAYOUT_VARS},
        "TMPDIR": os.environ["TMPDIR"],
        "HF_HOME": os.environ["HF_HOME"],
        "node_dir": str(info.node_dir),
        "mark": (info.node_dir / "mark").read_text(),
    }


def main(argv: list[str]) -> None:
    dist.init_process_group("gloo")
    if argv[0] == "layout":
        print(json.dumps(layout()), flush=True)
    elif argv[0] == "train":
        train(argv[1], resume=argv[2])
    leave()


def leave() -> None:
    """Exit without the interpreter's teardown. Here about 1 gloo worker exit in 12 aborts in a
    C++ destructor after destroy_process_group ("terminate called without an active exception",
    torch 2.13 CPU; pytorch#190489, #179291): the tests are about the launcher, not about that."""
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
