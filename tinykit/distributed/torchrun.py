"""Whole programs on emulated nodes, with the real launcher: one torchrun agent per node.

    >>> job = run_torchrun(["python", "train.py"], nodes=2, nproc_per_node=2)  # doctest: +SKIP
    >>> job.rank_lines(3)                                                        # doctest: +SKIP

Every node is torchrun's own agent (`torch.distributed.run`, through `_agent`, which adds a
lifeline) with c10d rendezvous on a TCPStore that this process hosts on 127.0.0.1, so an agent
that exits first never takes the rendezvous down with it; the elastic restarts of
`max_restarts` work as on a cluster. Each node gets its own folder, TMPDIR and HF_HOME beside one
shared folder (`nodes.NodeFolders`), and its output comes back as "[node1 rank3] line". No ssh,
no hostfile, no deepspeed (the field guide's recipe needs all three).

c10d numbers nodes by sorting their addresses (torchrun ignores --node-rank there), so node i
gets the loopback address 127.0.0.<i+1>: node 0 is always group rank 0, and the workers' store
is on 127.0.0.1. The other addresses only order the nodes; nothing connects to them.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tinykit._files import output_errors
from tinykit.distributed.faults import Fault
from tinykit.distributed.nodes import RANK_ENV_DEFAULTS, NodeFolders, NodeLayout, gpu_groups
from tinykit.distributed.ports import loopback_store
from tinykit.distributed.processes import TAG_VAR, children, kill_tagged, kill_tree
from tinykit.errors import DistributedTestFailed, UsageError

GRACE_AFTER_FAILURE_S = 15.0  # the other nodes' time to notice a failed node and exit
STACK_WAIT_S = 3.0  # after SIGABRT: time for faulthandler dumps to pass through torchrun's tee
TAIL_LINES = 60  # of output in the error when it was not echoed
PREFIX_TEMPLATE = "[node{node} rank${{rank}}] "  # torchrun fills ${rank} per worker


@dataclass
class TorchrunJob:
    """What a `run_torchrun` job did: exit codes, and every output line with its prefix."""

    command: list[str]
    layout: NodeLayout
    workdir: Path
    returncodes: list[int | None] = field(default_factory=list)  # per node (agent)
    lines: list[tuple[int, str, str]] = field(default_factory=list)  # (node, stream, text)
    timed_out: bool = False
    seconds: float = 0.0
    tag: str = ""  # TINYKIT_DIST_POOL of every process of the job (processes.tagged finds them)

    @property
    def returncode(self) -> int:
        """0 when every node succeeded, else the first failing node's code (-9: killed)."""
        return next((rc for rc in self.returncodes if rc != 0 and rc is not None), 0)

    @property
    def output(self) -> str:
        return "\n".join(text for _, _, text in self.lines)

    def rank_lines(self, rank: int, stream: str = "stdout") -> list[str]:
        """Rank `rank`'s own lines on `stream`, without the prefix."""
        tags = tuple(f"[node{n} rank{rank}] " for n in range(self.layout.nodes))
        found = []
        for _, s, text in self.lines:
            if s == stream and text.startswith(tags):
                found.append(text.split("] ", 1)[1])
        return found


def run_torchrun(
    command: list[str],
    *,
    nodes: int = 2,
    nproc_per_node: int = 2,
    max_restarts: int = 0,
    timeout: float = 600.0,
    env: dict[str, str] | None = None,
    fault: Fault | str | dict[str, Any] | None = None,
    workdir: str | Path | None = None,
    echo: bool = True,
    check: bool = True,
) -> TorchrunJob:
    """Run `command` (e.g. `["python", "train.py", "--steps", "5"]`) on every rank of `nodes`
    emulated nodes, each a real torchrun agent with `nproc_per_node` workers.

    Args:
        max_restarts: torchrun's elastic restarts per node: after a failure the whole job
            rendezvouses again and every worker starts anew (TORCHELASTIC_RESTART_COUNT > 0).
        timeout: seconds for the whole job; then every worker prints its Python stacks
            (faulthandler on SIGABRT) and every process of the job is killed.
        env: extra environment variables for every node (they win over the per-node folders).
        fault: a `fail(rank=, at=)` the program's `fault_point` calls will fire.
        workdir: where `shared/` and `node<i>/` go (made if missing, kept, never emptied);
            default a temporary folder, removed after the job.
        echo: print the prefixed lines as they come (stdout and stderr kept apart).
        check: raise when the job fails or times out (with the output's last lines when it was
            not echoed); else return it.

    Raises:
        DistributedTestFailed: a node exited non-zero or the job timed out (`.job` holds it).
        UsageError: an empty command, a bad layout or fault.
    """
    if not command:
        raise UsageError("run_torchrun needs a command, e.g. ['python', 'train.py'].")
    layout = NodeLayout.of(nodes=nodes, procs_per_node=nproc_per_node)
    fault = Fault.coerce(fault) if fault is not None else None
    if workdir is not None and Path(workdir).exists() and not Path(workdir).is_dir():
        raise UsageError(f"workdir {workdir} is a file, not a folder. Pass a folder (--workdir).")
    root = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="tinykit-run-"))
    job = TorchrunJob(list(command), layout, root)
    try:
        with output_errors(root, flag="--workdir"):  # read-only, a parent that is a file
            folders = NodeFolders(root, layout.nodes, keep=True)
        _Launch(job, folders, max_restarts, env or {}, fault, echo).run(timeout)
    finally:
        if workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    if check and (job.returncode or job.timed_out):
        message = _failure_message(job, timeout)
        if not echo:  # nobody saw the output: the end of it goes with the error
            tail = "\n".join(text for _, _, text in job.lines[-TAIL_LINES:])
            message += f"\n--- last {TAIL_LINES} lines of output ---\n{tail}"
        raise DistributedTestFailed(message, per_rank=[], timed_out=job.timed_out, job=job)
    return job


class _Launch:
    """The processes of one job: the rendezvous store, one agent per node, their readers."""

    def __init__(
        self,
        job: TorchrunJob,
        folders: NodeFolders,
        max_restarts: int,
        env: dict[str, str],
        fault: Fault | None,
        echo: bool,
    ) -> None:
        self.job, self.folders, self.max_restarts = job, folders, max_restarts
        self.env, self.fault, self.echo = env, fault, echo
        self.tag = job.tag = f"launch-{uuid.uuid4().hex[:12]}"
        self.agents: list[subprocess.Popen[bytes]] = []
        self.readers: list[threading.Thread] = []
        self.lock = threading.Lock()

    def run(self, timeout: float) -> None:
        started = time.monotonic()
        store = loopback_store()  # the rendezvous: outlives every agent, listens on loopback only
        try:
            for node in range(self.job.layout.nodes):
                self.agents.append(self._start(node, store.port))
            self._wait(started + timeout)
        finally:
            self._stop_all()
            self.job.seconds = time.monotonic() - started
            del store

    def _start(self, node: int, port: int) -> subprocess.Popen[bytes]:
        layout = self.job.layout
        package_root = str(Path(__file__).resolve().parents[2])  # the folder holding tinykit/
        env = {
            **os.environ,
            **RANK_ENV_DEFAULTS,
            **self.folders.env(node),
            "NODE_RANK": str(node),
            **self._restart_env(),
            **self.env,
            **(self.fault.env() if self.fault else {}),
            TAG_VAR: self.tag,
            "PYTHONUNBUFFERED": "1",
            "PYTHONFAULTHANDLER": "1",  # SIGABRT at the time limit prints every thread's stack
            "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": PREFIX_TEMPLATE.format(node=node),
            "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.getenv("PYTHONPATH")])),
        }
        gpus = gpu_groups(layout)
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpus[node]
        argv = [
            sys.executable,
            "-m",
            "tinykit.distributed._agent",
            f"--nnodes={layout.nodes}",
            f"--nproc-per-node={layout.procs_per_node}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id={self.tag}",
            "--rdzv-conf=is_host=0",
            f"--local-addr=127.0.0.{node + 1}",
            f"--max-restarts={self.max_restarts}",
            "--monitor-interval=0.2",
            "--tee=3",  # the workers' lines come back through the agent, with PREFIX_TEMPLATE
            f"--log-dir={self.folders.node(node) / 'torchrun-logs'}",
            "--no-python",  # the command runs as given: "python train.py", "python -m pkg", ...
            *self.job.command,
        ]
        agent = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,  # the lifeline: closed or gone, the agent kills its tree
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
        for name, stream in (("stdout", agent.stdout), ("stderr", agent.stderr)):
            t = threading.Thread(target=self._read, args=(node, name, stream), daemon=True)
            t.start()
            self.readers.append(t)
        return agent

    def _restart_env(self) -> dict[str, str]:
        """With restarts, a fresh worker store per attempt. The agent's shared store (torch's
        default) keeps the keys of the attempt before, and the restarted ranks of a node whose
        agent did not count a failure (TORCHELASTIC_RESTART_COUNT 0) read the dead ranks'
        addresses: "Gloo connectFullMesh failed ... Connection refused" (pytorch#135712)."""
        return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if self.max_restarts else {}

    def _read(self, node: int, name: str, stream: IO[bytes]) -> None:
        own = f"[node{node} "
        out = sys.stdout if name == "stdout" else sys.stderr
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            text = line if line.startswith(own) else f"[node{node} agent] {line}"
            with self.lock:
                self.job.lines.append((node, name, text))
                if self.echo:
                    print(text, file=out, flush=True)

    def _wait(self, deadline: float) -> None:
        """Until every agent exits; after a failed node the others get a grace period."""
        while True:
            codes = [a.poll() for a in self.agents]
            if all(c is not None for c in codes):
                return
            if any(c not in (None, 0) for c in codes):
                deadline = min(deadline, time.monotonic() + GRACE_AFTER_FAILURE_S)
            if time.monotonic() >= deadline:
                self.job.timed_out = not any(c not in (None, 0) for c in codes)
                self._dump_stacks()
                return
            time.sleep(0.1)

    def _dump_stacks(self) -> None:
        """SIGABRT every worker: PYTHONFAULTHANDLER prints all its threads' stacks on stderr
        (the agent turned core dumps off)."""
        for agent in self.agents:
            if agent.poll() is None:
                for pid in children(agent.pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGABRT)
        time.sleep(STACK_WAIT_S)

    def _stop_all(self) -> None:
        for agent in self.agents:
            if agent.poll() is None:
                kill_tree(agent.pid)
            if agent.stdin:
                agent.stdin.close()
            agent.wait()
        for t in self.readers:
            t.join(timeout=5)
        kill_tagged(self.tag)  # a worker whose agent died first is no longer in any tree
        self.job.returncodes = [a.returncode for a in self.agents]


def _failure_message(job: TorchrunJob, timeout: float) -> str:
    command = shlex.join(job.command).replace("\n", "\\n")  # the message stays one line
    if len(command) > 120:
        command = command[:117] + "..."
    what = f"`{command}` on {job.layout} (torchrun)"
    if job.timed_out:
        return (
            f"{what} timed out after {timeout:g} s. Every worker's Python stacks are in its "
            "output above (Fatal Python error: Aborted); ranks waiting in different collectives "
            "are the usual cause. If the program is only slow, raise --timeout."
        )
    failed = ", ".join(
        f"node {i} exited with {rc}" for i, rc in enumerate(job.returncodes) if rc not in (0, None)
    )
    return (
        f"{what} failed: {failed}. torchrun's 'Root Cause' section above names the first rank "
        "that failed; its own lines are prefixed [nodeN rankR]."
    )
