"""Emulated nodes on one host: the rank layout torchrun gives, and a local disk per node.

On a cluster each node has its own local disk (TMPDIR, the Hugging Face cache) beside a shared
filesystem, and torchrun numbers ranks node by node. Code that saves on the global rank 0 where
it should use each node's local rank 0, or caches on one node's disk what the other node needs,
passes every single-node test. Here every emulated node gets its own folder and the ranks get
exactly the variables `torchrun --nnodes N --nproc-per-node P` sets, so those bugs show on one
machine. The warm pool (`RankPool`) and `run_torchrun` both use this module.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from tinykit.errors import UsageError

MAX_NODES = 8  # an emulation on one host; c10d orders nodes by their address (see torchrun.py)
# Same defaults torchrun uses for several ranks on one host, plus gloo pinned to loopback
# (accelerate's debug_launcher does the same); the user's environment wins.
RANK_ENV_DEFAULTS = {"OMP_NUM_THREADS": "1"}
if sys.platform == "linux":  # the loopback interface is "lo0" on macOS
    RANK_ENV_DEFAULTS["GLOO_SOCKET_IFNAME"] = "lo"
NODE_DIR_VAR = "TINYKIT_NODE_DIR"
SHARED_DIR_VAR = "TINYKIT_SHARED_DIR"


@dataclass(frozen=True)
class NodeLayout:
    """`nodes` emulated nodes of `procs_per_node` ranks; ranks are numbered node by node."""

    nodes: int = 1
    procs_per_node: int = 2

    @classmethod
    def of(
        cls, world_size: int | None = None, nodes: int = 1, procs_per_node: int | None = None
    ) -> NodeLayout:
        """The layout from any two of world size, nodes and ranks per node (world size 2 alone).

        Raises:
            UsageError: a count below 1, more than MAX_NODES nodes, or a world size that the
                nodes do not divide (or that disagrees with nodes × procs_per_node).
        """
        if not 1 <= nodes <= MAX_NODES:
            raise UsageError(
                f"nodes={nodes} is out of range: emulate 1 to {MAX_NODES} nodes on one host."
            )
        if procs_per_node is None:
            world = 2 if world_size is None else world_size
            if world < 1 or world % nodes:
                raise UsageError(
                    f"world_size={world} cannot be split over nodes={nodes}: pass a world size "
                    f"that is a multiple of the nodes, or procs_per_node= instead."
                )
            procs_per_node = world // nodes
        if procs_per_node < 1:
            raise UsageError(f"procs_per_node={procs_per_node} is not a number of ranks; use >= 1.")
        if world_size is not None and world_size != nodes * procs_per_node:
            raise UsageError(
                f"world_size={world_size} disagrees with nodes={nodes} × procs_per_node="
                f"{procs_per_node}; pass two of the three."
            )
        return cls(nodes, procs_per_node)

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    def node_of(self, rank: int) -> int:
        return rank // self.procs_per_node

    def __str__(self) -> str:
        return f"{self.nodes} node(s) × {self.procs_per_node} rank(s)"


def rank_env(layout: NodeLayout, rank: int, master_port: int, run_id: str) -> dict[str, str]:
    """The variables torchrun's agent gives worker `rank` (torch 2.13, one role, first attempt),
    plus NODE_RANK, which Lightning and accelerate read and torchrun leaves unset."""
    node = layout.node_of(rank)
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank % layout.procs_per_node),
        "GROUP_RANK": str(node),
        "NODE_RANK": str(node),
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(layout.procs_per_node),
        "WORLD_SIZE": str(layout.world_size),
        "GROUP_WORLD_SIZE": str(layout.nodes),
        "ROLE_WORLD_SIZE": str(layout.world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "True",
    }


class NodeFolders:
    """`root/shared/` plus `root/node<i>/` (with `tmp/` and `hf_home/`) for every node.

    The paths stay the same for the folders' life (a warm rank that imported huggingface_hub
    keeps the HF_HOME it read then); `clear()` empties them between jobs. `keep=True` leaves
    what is already there (a workdir given to `run_torchrun`).
    """

    def __init__(self, root: Path, nodes: int, *, keep: bool = False) -> None:
        self.root = Path(root)
        self.nodes = nodes
        if keep:
            self._make()
        else:
            self.clear()

    @property
    def shared(self) -> Path:
        return self.root / "shared"

    def node(self, index: int) -> Path:
        return self.root / f"node{index}"

    def clear(self) -> None:
        """Empty every folder, leaving the layout in place."""
        for folder in [self.shared, *(self.node(i) for i in range(self.nodes))]:
            shutil.rmtree(folder, ignore_errors=True)
        self._make()

    def _make(self) -> None:
        self.shared.mkdir(parents=True, exist_ok=True)
        for i in range(self.nodes):
            for sub in ("tmp", "hf_home"):
                (self.node(i) / sub).mkdir(parents=True, exist_ok=True)

    def env(self, index: int) -> dict[str, str]:
        """What node `index`'s processes see: their own TMPDIR and HF_HOME when there are several
        nodes (one node keeps the host's, as before), and both folders by name."""
        env = {NODE_DIR_VAR: str(self.node(index)), SHARED_DIR_VAR: str(self.shared)}
        if self.nodes > 1:
            env["TMPDIR"] = str(self.node(index) / "tmp")
            env["HF_HOME"] = str(self.node(index) / "hf_home")
        return env


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as CUDA_VISIBLE_DEVICES entries."""
    from tinykit._devices import gpu_count

    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    return [str(i) for i in range(gpu_count("cuda"))]


def gpu_groups(layout: NodeLayout) -> list[str] | None:
    """Disjoint CUDA_VISIBLE_DEVICES per node (`procs_per_node` GPUs each), as on separate
    machines: every node's local rank 0 sees its own cuda:0. None when there are fewer GPUs
    than ranks, or one node (the host's devices stay as they are)."""
    gpus = visible_gpus()
    if layout.nodes == 1 or len(gpus) < layout.world_size:
        return None
    per = layout.procs_per_node
    return [",".join(gpus[i * per : (i + 1) * per]) for i in range(layout.nodes)]
