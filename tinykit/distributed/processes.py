"""No process left behind: tags, process-tree kills and the lifeline of every process we start.

Rank processes and torchrun agents each run in their own session, and torchrun starts every
worker in a session of its own, so one `killpg` never reaches a whole job. Each process tinykit
starts for a job therefore carries a tag (an environment variable its children inherit), holds a
lifeline (its stdin, a pipe from the parent: EOF means the parent died, even by SIGKILL) and is
taken down with its whole tree of descendants.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

TAG_VAR = "TINYKIT_DIST_POOL"  # in every rank, agent and worker: finds strays by job
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, grandchildren, ...)."""
    return children(pid, recursive=True)


def children(pid: int, recursive: bool = False) -> list[int]:
    """The processes `pid` started (and theirs, with `recursive`); [] once it is gone."""
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=recursive)]
    except psutil.NoSuchProcess:
        return []


def kill_tree(pid: int) -> None:
    """SIGKILL `pid`, its process group and every descendant's group, without a race with a
    parent that is still starting children: the root is stopped first."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGSTOP)
    for child in descendants(pid):
        _kill_group_of(child)
    _kill_group_of(pid)


def _kill_group_of(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        group = os.getpgid(pid)
        if group != os.getpgrp():  # never our own group (pytest's, the launcher's)
            os.killpg(group, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def tagged(tag: str) -> list[int]:
    """Live (non-zombie) processes of this user whose environment carries `tag`."""
    import psutil

    found = []
    for p in psutil.process_iter(["status", "uids"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE or p.info["uids"].real != os.getuid():
                continue
            if p.environ().get(TAG_VAR) == tag:
                found.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def kill_tagged(tag: str) -> None:
    """Last sweep after a job: kill whatever still carries its tag (e.g. a worker whose agent was
    killed, reparented away from our tree)."""
    for pid in tagged(tag):
        if pid != os.getpid():
            _kill_group_of(pid)


def die_with_parent(also: str = "group") -> None:
    """Block on stdin (the parent's pipe); at EOF the parent is gone: take our process group
    down, and with `also="tree"` every descendant first (torchrun's workers have own sessions).

    Runs in a daemon thread of the child.
    """
    try:
        while os.read(0, 4096):  # the raw fd: a buffered read would hold a lock at shutdown
            pass
    finally:
        if also == "tree":
            for child in descendants(os.getpid()):
                _kill_group_of(child)
        os.killpg(os.getpgrp(), signal.SIGKILL)


def no_core_dumps() -> None:
    """Core files off for this process and its children (SIGABRT asks workers for stacks)."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def become_subreaper() -> None:
    """Adopt orphans of our descendants (Linux), so a worker's children stay in our tree when
    the worker dies and the tree kill still finds them."""
    if sys.platform != "linux":
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
