"""Shared test setup: real inputs from ../shared, an isolated HF cache, torch imported once."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

# Import torch once in the outer process: an in-process pytester run that imports it a second
# time can crash the whole session (shared/docs/style.md B.8).
import torch  # noqa: F401


def _loopback(host: object) -> bool:
    if host in (None, "localhost", "") or not isinstance(host, str | bytes):
        return True
    try:
        return ipaddress.ip_address(host if isinstance(host, str) else host.decode()).is_loopback
    except ValueError:
        return False


def _no_network(event: str, args: tuple) -> None:
    """Fail any test that looks up or connects to anything but this machine (the Hub is offline)."""
    if event == "socket.connect" and isinstance(args[1], tuple) and not _loopback(args[1][0]):
        raise ConnectionRefusedError(f"tinykit tests never leave loopback: connect to {args[1]!r}")
    if event == "socket.getaddrinfo" and not _loopback(args[0]):
        raise ConnectionRefusedError(f"tinykit tests never leave loopback: lookup of {args[0]!r}")


sys.addaudithook(_no_network)

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TINYKIT_SHARED", REPO.parent / "shared"))
HUB_FILES = SHARED / "hub-files"
# A sample downstream repo with its own pytest.ini: tests/test_downstream.py runs it as a session.
collect_ignore = ["downstream"]


# Every process a test starts inherits OWNER_VAR, a token of this pytest process (each xdist
# worker sets its own): after the suite, one still running is a process some test left behind.
# A token, not the pid: a stray of another session whose pytest once had this pid is not ours.
# The xdist workers carry their controller's token, never their own.
OWNER_VAR = "TINYKIT_TEST_OWNER"
# The interpreter's own helpers (a ProcessPoolExecutor's semaphores start the resource tracker):
# they live as long as this process and end with it, so they are not left behind.
INTERPRETER_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def pytest_configure(config):
    os.environ[OWNER_VAR] = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"


def _left_behind() -> list:
    """Live processes this pytest process started (children, or orphans that inherited its
    token), except the interpreter's helpers and the warm rank pools, which pytest_unconfigure
    closes after this check (their own sweep is tested in test_dist_*). Other users' processes,
    whose environment cannot be read, are not ours."""
    import psutil

    from tinykit.distributed.processes import TAG_VAR

    me, owner = os.getpid(), os.environ[OWNER_VAR]
    found = {p.pid: p for p in psutil.Process(me).children(recursive=True)}
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.pid != me and p.environ().get(OWNER_VAR) == owner:
                found[p.pid] = p
    left = []
    for p in found.values():
        with contextlib.suppress(psutil.Error):
            if (
                p.status() != psutil.STATUS_ZOMBIE
                and TAG_VAR not in p.environ()
                and not any(h in " ".join(p.cmdline()) for h in INTERPRETER_HELPERS)
            ):
                left.append(p)
    return left


@pytest.fixture(scope="session", autouse=True)
def _no_process_left_behind():
    """After the last test of this process: no process a test started is still running."""
    import psutil

    yield
    deadline = time.monotonic() + 10  # a process being torn down right now may still exit
    while (left := _left_behind()) and time.monotonic() < deadline:
        time.sleep(0.2)
    shown = []
    for p in left:
        with contextlib.suppress(psutil.Error):
            shown.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            p.kill()
    assert not shown, "processes left behind by the tests (now killed):\n" + "\n".join(shown)


def with_ctrl_c() -> None:
    """preexec_fn for a child that must take Ctrl-C: CI runs as a background job of a
    non-interactive shell, whose children inherit SIGINT ignored, and Python leaves it so."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def _no_seed_carried_over():
    """seed_everything (check_determinism's in-process runs too) exports TINYKIT_SEED for child
    processes: one test's seed must not become the session seed of a later test's pytester run
    on the same xdist worker."""
    before = os.environ.get("TINYKIT_SEED")
    yield
    if before is None:
        os.environ.pop("TINYKIT_SEED", None)
    else:
        os.environ["TINYKIT_SEED"] = before


@pytest.fixture(autouse=True)
def _isolated_hf_home(tmp_path_factory, monkeypatch):
    """No test reads or writes the user's Hugging Face cache."""
    home = tmp_path_factory.getbasetemp() / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("TINYKIT_CACHE", str(tmp_path_factory.getbasetemp() / "tinykit-cache"))


@pytest.fixture(scope="session")
def coverage_classes() -> dict[str, str]:
    """type -> the transformers class a whole-group sweep builds it with (`coverage.plan`)."""
    from tinykit.coverage.sweep import plan

    return plan(every=True)[2]
