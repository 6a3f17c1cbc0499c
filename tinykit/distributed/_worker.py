"""One rank process of a `RankPool`: `python -m tinykit.distributed._worker JOB_FD RESULT_FD STACK_FILE`.

It imports torch once, then runs jobs sent by the parent until the job pipe closes. Each job sets
the rank's environment, initialises the process group, calls the function and destroys the group.
Protocol (pickled bytes over two pipes): the worker sends ("ready", pid) once, then one result dict
per job. After each job it writes END_MARK on stdout and stderr so the parent can tell which output
belongs to which job.

This module is private: the parent side is `tinykit.distributed.pool`.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

# Functions are named and exceptions packed as for every tinykit child process.
from tinykit._child import FunctionRef, pack_exception
from tinykit.distributed import faults
from tinykit.distributed.processes import die_with_parent

END_MARK = "\x1etinykit-job-end"
STACK_SIGNAL = signal.SIGUSR1


def _set_rng(state: dict[str, Any]) -> None:
    import random

    import torch

    random.setstate(state["random"])
    if "numpy" in state:
        import numpy

        numpy.random.set_state(state["numpy"])
    if "torch" in state:
        torch.random.set_rng_state(state["torch"])


def _run(header: dict[str, Any], payload: bytes, base_env: dict[str, str]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    os.environ.clear()
    os.environ.update(base_env)
    os.environ.update(header["env"])
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again: each emulated node has its own
    for entry in reversed(header["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    os.chdir(header["cwd"])
    _set_rng(header["rng"])
    try:
        fn, args, kwargs = pickle.loads(payload)
        if isinstance(fn, FunctionRef):
            fn = fn.resolve()
        if header["backend"] == "nccl":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(
            header["backend"],
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
            timeout=timedelta(seconds=header["pg_timeout"]),
        )
        # A rank whose fn returns at once would otherwise tear its sockets down while a slower
        # peer is still connecting ("connectFullMesh failed: Connection closed by peer").
        dist.barrier()
        faults.arm_from_env()  # after our own barrier: a "barrier:N" fault counts the job's
        try:
            value = fn(*args, **kwargs)
        finally:
            faults.arm(None)
        if dist.is_initialized():
            # same at the end: no rank leaves while a peer finishes its last op. If a peer failed,
            # this barrier fails too; this rank still passed, and the peer's report says why.
            with contextlib.suppress(RuntimeError):
                dist.barrier()
        try:
            return {"ok": True, "value": pickle.dumps(value)}
        except Exception as e:
            raise TypeError(
                f"The return value of {getattr(fn, '__qualname__', fn)!r} on rank "
                f"{os.environ['RANK']} cannot be pickled ({type(value).__name__}): {e}. "
                "Return plain data or tensors, or write to a file under tmp_path."
            ) from e
    except BaseException as e:  # pytest's Skipped/Failed are BaseExceptions too
        # the wall-clock time tells the parent which rank failed first (all ranks share a host)
        return {"ok": False, "error": pack_exception(e), "failed_at": time.time()}
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def main(argv: list[str]) -> None:
    job_conn = Connection(int(argv[0]), writable=False)
    result_conn = Connection(int(argv[1]), readable=False)
    stack_file = open(argv[2], "w")  # noqa: SIM115 - faulthandler keeps writing to it until exit
    faulthandler.enable(file=sys.stderr)
    faulthandler.register(STACK_SIGNAL, file=stack_file, all_threads=True)
    threading.Thread(target=die_with_parent, name="tinykit-lifeline", daemon=True).start()

    import torch.distributed  # noqa: F401 - the expensive import, paid once per worker

    base_env = dict(os.environ)
    result_conn.send_bytes(pickle.dumps(("ready", os.getpid())))
    while True:
        try:
            header, payload = pickle.loads(job_conn.recv_bytes())
        except EOFError:
            return
        result = _run(header, payload, base_env)
        result["job_id"] = header["job_id"]
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(1, f"{END_MARK}\n".encode())
        os.write(2, f"{END_MARK}\n".encode())
        result_conn.send_bytes(pickle.dumps(result))


if __name__ == "__main__":
    # Run the importable module's main, not __main__'s copy, so there is one module state.
    from tinykit.distributed._worker import main as _main

    _main(sys.argv[1:])
