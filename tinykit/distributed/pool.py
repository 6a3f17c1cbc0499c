"""A pool of rank processes that stays warm across tests, and its reliable teardown.

Every rank is a fresh `python -m tinykit.distributed._worker` (never a fork of pytest) in its own process
group, so one `killpg` removes the rank and anything it started. Importing torch (~1.8 s) happens
once per worker; each job then only pays for `init_process_group` on a new TCPStore that the
parent hosts on an OS-chosen port (TORCHELASTIC_USE_AGENT_STORE, as torchrun's agent does), so
launches never race for a port.

Why a failed job discards the pool: after a hang or a crash the survivors may sit in a collective
or hold half-torn-down communicators (the DeepSpeed pool-reuse leaks and hangs, deepspeed#6623,
#7334). Only pools whose last job passed on every rank are reused.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from tinykit.distributed._worker import END_MARK, STACK_SIGNAL
from tinykit.distributed.nodes import (
    RANK_ENV_DEFAULTS,
    NodeFolders,
    NodeLayout,
    gpu_groups,
    rank_env,
)
from tinykit.distributed.ports import loopback_store
from tinykit.distributed.processes import TAG_VAR
from tinykit.errors import SetupError

POOL_TAG_VAR = TAG_VAR  # set in every rank: lets tests find stray processes
GRACE_AFTER_FAILURE_S = 3.0  # how long the other ranks get to finish once one rank has failed


@dataclass
class RankOutcome:
    """What one rank did in one job."""

    rank: int
    status: str  # "ok" | "error" | "died" | "hung"
    value: Any = None
    error: dict[str, Any] | None = None  # type, message, traceback, exception (None if unpicklable)
    exit_code: int | None = None  # for "died": negative means killed by that signal
    stack: str = ""  # faulthandler dump of every Python thread, for "hung"
    output: list[str] = field(default_factory=list)  # "[rank N] line", stdout+stderr interleaved
    failed_at: float = float("inf")  # time.time() of the failure: the earliest is the likely cause


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen[bytes]
    job_conn: Connection
    result_conn: Connection
    stack_path: Path
    readers: list[threading.Thread]
    ready: bool = False


class RankPool:
    """`world_size` rank processes on this host that run jobs with an initialised process group,
    on `nodes` emulated nodes (each with its own folder, TMPDIR, HF_HOME and, under NCCL, GPUs).

    Example:
        >>> pool = RankPool(2, "gloo")               # doctest: +SKIP
        >>> outcomes = pool.run(payload, timeout=30)  # doctest: +SKIP
        >>> pool.close()                              # doctest: +SKIP
    """

    def __init__(
        self,
        world_size: int,
        backend: str,
        env: dict[str, str] | None = None,
        start_timeout: float = 180.0,
        nodes: int = 1,
    ) -> None:
        self.layout = NodeLayout.of(world_size, nodes)
        self.world_size = world_size
        self.backend = backend
        self.env = dict(env or {})
        self.start_timeout = start_timeout
        self.tag = uuid.uuid4().hex[:12]
        self.broken = False
        self.jobs_run = 0
        self._dir = Path(tempfile.mkdtemp(prefix=f"tinykit-dist-{self.tag}-"))
        self.folders = NodeFolders(self._dir / "nodes", nodes)
        # separate machines: each node's local rank 0 sees its own cuda:0 (set before CUDA starts)
        self._gpus = gpu_groups(self.layout) if backend == "nccl" else None
        self._lock = threading.Lock()
        self._lines: list[tuple[int, str]] = []
        self._ends: dict[tuple[int, str], threading.Event] = {}
        self._ranks = [self._spawn(rank) for rank in range(world_size)]

    # ---- processes -------------------------------------------------------------------------

    def _spawn(self, rank: int) -> _Rank:
        job_r, job_w = os.pipe()
        res_r, res_w = os.pipe()
        stack_path = self._dir / f"stacks-rank{rank}.txt"
        package_root = str(Path(__file__).resolve().parents[2])  # the folder holding tinykit/
        env = {
            **os.environ,
            **self._node_env(rank),
            POOL_TAG_VAR: self.tag,
            "PYTHONUNBUFFERED": "1",
        }
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        proc = subprocess.Popen(
            [
                sys.executable,
                "-u",
                "-m",
                "tinykit.distributed._worker",
                str(job_r),
                str(res_w),
                str(stack_path),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(job_r, res_w),
            start_new_session=True,
            env=env,
        )
        os.close(job_r)
        os.close(res_w)
        readers = []
        for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            self._ends[(rank, name)] = threading.Event()
            t = threading.Thread(
                target=self._read,
                args=(rank, name, stream),
                daemon=True,
                name=f"tinykit-rank{rank}-{name}",
            )
            t.start()
            readers.append(t)
        return _Rank(
            rank,
            proc,
            Connection(job_w, readable=False),
            Connection(res_r, writable=False),
            stack_path,
            readers,
        )

    def _read(self, rank: int, name: str, stream: Any) -> None:
        prefix = f"[rank {rank}]"
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            if line == END_MARK:
                self._ends[(rank, name)].set()
                continue
            # print_rank() already prefixes its lines; do not say "[rank 0] [rank 0]"
            text = line if line.startswith(prefix) else f"{prefix} {line}"
            with self._lock:
                self._lines.append((rank, text))
        self._ends[(rank, name)].set()

    def _node_env(self, rank: int) -> dict[str, str]:
        node = self.layout.node_of(rank)
        env = self.folders.env(node)
        if self._gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = self._gpus[node]
        return env

    def pids(self) -> list[int]:
        return [r.proc.pid for r in self._ranks]

    @property
    def alive(self) -> bool:
        return not self.broken and all(r.proc.poll() is None for r in self._ranks)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        waiting = {r.result_conn: r for r in self._ranks if not r.ready}
        while waiting:
            for conn in wait(list(waiting), timeout=max(0.0, deadline - time.monotonic())):
                r = waiting.pop(conn)  # type: ignore[call-overload]
                try:
                    pickle.loads(r.result_conn.recv_bytes())
                    r.ready = True
                except EOFError:
                    self.kill()
                    raise SetupError(
                        f"Rank {r.rank} of a {self.world_size}-rank pool exited while starting "
                        f"(exit code {r.proc.wait()}). Its output:\n{self._tail(r.rank)}\n"
                        "Check that `python -m tinykit.distributed._worker` imports torch in this "
                        "environment."
                    ) from None
            if waiting and time.monotonic() >= deadline:
                self.kill()
                raise SetupError(
                    f"{len(waiting)} rank(s) of a {self.world_size}-rank pool did not start within "
                    f"{self.start_timeout:.0f} s (importing torch). The machine is overloaded; "
                    "retry with fewer pytest-xdist workers or a larger start_timeout."
                )

    def _tail(self, rank: int, n: int = 20) -> str:
        with self._lock:
            lines = [text for r, text in self._lines if r == rank]
        return "\n".join(lines[-n:])

    # ---- jobs ------------------------------------------------------------------------------

    def run(
        self,
        payload: bytes,
        *,
        timeout: float,
        pg_timeout: float | None = None,
        job_env: dict[str, str] | None = None,
    ) -> list[RankOutcome]:
        """Run one job (pickled `(fn, args, kwargs)`) on every rank; never raises for rank failures.

        Returns one outcome per rank. Ranks that have not answered `timeout` s after the start, or
        GRACE_AFTER_FAILURE_S after another rank failed, are "hung": their Python stacks are
        dumped (faulthandler) and the pool is killed.
        """
        self._wait_ready()
        if self.jobs_run:
            self.folders.clear()  # every job starts with empty node-local and shared folders
        store = loopback_store(self.world_size)
        with self._lock:
            self._lines.clear()
        for event in self._ends.values():
            event.clear()
        offsets = {r.rank: r.stack_path.stat().st_size for r in self._ranks}
        self.jobs_run += 1
        rng = rng_state()
        for r in self._ranks:
            header = {
                "job_id": self.jobs_run,
                "env": {
                    **os.environ,
                    **RANK_ENV_DEFAULTS,
                    **self._node_env(r.rank),  # the caller's env= and job_env win over these
                    **self.env,
                    **(job_env or {}),
                    **rank_env(self.layout, r.rank, store.port, f"{self.tag}-{self.jobs_run}"),
                    POOL_TAG_VAR: self.tag,
                },
                "sys_path": list(sys.path),
                "rng": rng,
                "cwd": os.getcwd(),
                "backend": self.backend,
                "pg_timeout": pg_timeout or timeout + 30,
            }
            r.job_conn.send_bytes(pickle.dumps((header, payload)))
        try:
            return self._collect(timeout, offsets)
        finally:
            del store

    def _collect(self, timeout: float, offsets: dict[int, int]) -> list[RankOutcome]:
        outcomes: dict[int, RankOutcome] = {}
        pending = {r.result_conn: r for r in self._ranks}
        deadline = time.monotonic() + timeout
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for conn in wait(list(pending), timeout=remaining):
                r = pending.pop(conn)  # type: ignore[call-overload]
                outcomes[r.rank] = self._receive(r)
                if outcomes[r.rank].status != "ok":
                    # the others are probably blocked in a collective with the failed rank
                    deadline = min(deadline, time.monotonic() + GRACE_AFTER_FAILURE_S)
        for r in pending.values():
            outcomes[r.rank] = RankOutcome(r.rank, "hung")
        if pending:
            self._dump_stacks(list(pending.values()), offsets, outcomes)
        failed = any(o.status != "ok" for o in outcomes.values())
        if failed:
            self.kill()  # readers see EOF, so all output is in
        else:
            for event in self._ends.values():
                event.wait(timeout=5)
        with self._lock:
            lines = list(self._lines)
        for o in outcomes.values():
            o.output = [text for rank, text in lines if rank == o.rank]
        return [outcomes[rank] for rank in range(self.world_size)]

    def _receive(self, r: _Rank) -> RankOutcome:
        try:
            msg = pickle.loads(r.result_conn.recv_bytes())
        except EOFError:
            return RankOutcome(r.rank, "died", exit_code=r.proc.wait(), failed_at=time.time())
        if msg["ok"]:
            try:
                return RankOutcome(r.rank, "ok", value=pickle.loads(msg["value"]))
            except Exception as e:  # e.g. a class the rank could import and this process cannot
                error: dict[str, Any] = {
                    "type": type(e).__qualname__,
                    "pytest_outcome": None,
                    "exception": e,
                    "message": f"its return value cannot be unpickled here: {e}",
                    "traceback": f"(rank {r.rank} returned, but unpickling failed: {e!r})",
                }
                return RankOutcome(r.rank, "error", error=error, failed_at=time.time())
        error = dict(msg["error"])
        exc_bytes = error.pop("exc_bytes")
        try:
            error["exception"] = pickle.loads(exc_bytes) if exc_bytes else None
        except Exception:
            error["exception"] = None
        return RankOutcome(r.rank, "error", error=error, failed_at=msg["failed_at"])

    def _dump_stacks(
        self, ranks: list[_Rank], offsets: dict[int, int], outcomes: dict[int, RankOutcome]
    ) -> None:
        for r in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(r.proc.pid, STACK_SIGNAL)
        # faulthandler writes from the signal handler at once; wait until the files stop growing
        sizes: dict[int, int] = {}
        for _ in range(40):
            time.sleep(0.05)
            now = {r.rank: r.stack_path.stat().st_size for r in ranks}
            if now == sizes and all(now[k] > offsets[k] for k in now):
                break
            sizes = now
        for r in ranks:
            with open(r.stack_path, errors="replace") as f:
                f.seek(offsets[r.rank])
                threads = f.read().strip().split("\n\n")
            # the worker's own lifeline thread says nothing about the hang
            outcomes[r.rank].stack = "\n\n".join(t for t in threads if "die_with_parent" not in t)

    # ---- teardown --------------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL every rank's process group now and reap it; idempotent."""
        self.broken = True
        for r in self._ranks:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(r.proc.pid, signal.SIGKILL)
        self._reap()

    def close(self, grace: float = 5.0) -> None:
        """Let idle ranks exit (job pipe closed), then kill whatever is left of their groups."""
        self.broken = True
        for r in self._ranks:
            r.job_conn.close()
        deadline = time.monotonic() + grace
        for r in self._ranks:
            with contextlib.suppress(subprocess.TimeoutExpired):
                r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        self.kill()

    def _reap(self) -> None:
        for r in self._ranks:
            r.proc.wait()
            closables: list[Any] = [r.job_conn, r.result_conn, r.proc.stdin]
            for t, stream in zip(r.readers, (r.proc.stdout, r.proc.stderr), strict=True):
                t.join(timeout=5)
                # A process that left the group (setsid) may still hold the pipe; closing it
                # under a reader blocked in readline() would block us too, so leave it open.
                if not t.is_alive():
                    closables.append(stream)
            for closable in closables:
                with contextlib.suppress(OSError):
                    closable.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def rng_state() -> dict[str, Any]:
    """The caller's Python, NumPy and torch CPU RNG states, so every rank starts where a seeding
    fixture (or `torch.manual_seed` in the test's setup) left the pytest process."""
    state: dict[str, Any] = {"random": random.getstate()}
    if "numpy" in sys.modules:
        state["numpy"] = sys.modules["numpy"].random.get_state()
    if "torch" in sys.modules:
        state["torch"] = sys.modules["torch"].random.get_rng_state()
    return state


class PoolRegistry:
    """Warm pools keyed by (world size, backend, extra env, nodes); one per pytest session."""

    def __init__(self) -> None:
        self._pools: dict[tuple[Any, ...], RankPool] = {}

    def get(
        self, world_size: int, backend: str, env: dict[str, str] | None = None, nodes: int = 1
    ) -> RankPool:
        key = (world_size, backend, tuple(sorted((env or {}).items())), nodes)
        pool = self._pools.get(key)
        if pool is None or not pool.alive:
            if pool is not None:
                pool.kill()
            pool = self._pools[key] = RankPool(world_size, backend, env, nodes=nodes)
        return pool

    def discard(self, pool: RankPool) -> None:
        pool.kill()
        self._pools = {k: p for k, p in self._pools.items() if p is not pool}

    def close(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()


DEFAULT_REGISTRY = PoolRegistry()
atexit.register(DEFAULT_REGISTRY.close)
