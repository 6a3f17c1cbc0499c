"""A user's command run as its own process group, so that nothing it starts outlives it.

Every command that runs a user's command (`mem run`, `standins discover`, bisect and matrix
steps) goes through `run_command`: the command starts in a new session, and on Ctrl-C,
SIGTERM or its timeout the whole group gets the signal (SIGINT for Ctrl-C, else SIGTERM), then
SIGKILL after `GRACE` seconds, and is waited for; what the command left running in its group
after it exited is ended the same way. Exit codes follow the shell: a command killed by signal
N exits 128 + N (SIGKILL 137, SIGSEGV 139), never Python's negative code.

`stop_on_sigterm` turns SIGTERM into a KeyboardInterrupt (`Terminated`), so the same `finally`
blocks and this module's forwarding run for both signals.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

__all__ = [
    "GRACE",
    "TIMED_OUT",
    "Finished",
    "Terminated",
    "end_group",
    "run_command",
    "shell_code",
    "stop_on_sigterm",
]

GRACE = 5.0  # seconds between the polite signal and SIGKILL
TIMED_OUT = 124  # the exit code of a command stopped at its timeout, as timeout(1) reports it


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be: the same `finally` blocks run on the way out."""


def _interrupt(signum: int, frame: object) -> None:
    raise Terminated(f"signal {signum}")


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """While the block runs, SIGTERM raises `Terminated` (a KeyboardInterrupt) in the main
    thread."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def shell_code(returncode: int) -> int:
    """A `Popen.returncode` as a shell reports it: -N (killed by signal N) is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class Finished:
    """How a command ended: its shell-style exit code, whether its timeout stopped it, and its
    output when it was captured."""

    returncode: int
    timed_out: bool
    seconds: float
    output: str = ""


def end_group(pgid: int, sig: int = signal.SIGTERM, grace: float = GRACE) -> None:
    """Send `sig` to process group `pgid`, SIGKILL what is left after `grace` seconds, and wait
    (a while) until the group is gone. Members that are not this process's children are
    reaped by init; a zombie leader must be reaped by its parent (Popen.wait) for the group
    to end, which callers do after this."""
    if not _group_alive(pgid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    if sig != signal.SIGKILL and _wait_group(pgid, grace):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    _wait_group(pgid, grace)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (zombies do not count)."""
    import psutil

    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error, OSError):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return True
    return False


def _wait_group(pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def run_command(
    cmd: Sequence[str] | str,
    *,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    capture: bool = False,
    shell: bool = False,
    on_start: Callable[[subprocess.Popen], object] | None = None,
    stop_signal: int | None = None,
    grace: float = GRACE,
) -> Finished:
    """Run `cmd` in its own session and wait for it (see the module docstring).

    `capture` collects stdout and stderr together (else they pass through). `on_start`, if
    given, is called with the Popen as soon as it exists (a sampler watching the tree). A timeout
    is not an error: `Finished.timed_out` says so, with `returncode` TIMED_OUT. Ctrl-C and
    SIGTERM are passed on to the group, then re-raised once it is gone. `stop_signal` is the
    signal the group gets then and at the timeout (default: SIGINT for Ctrl-C, else SIGTERM),
    with `grace` seconds before SIGKILL: a recorded command gets SIGINT, on which its Python
    processes still write their dumps.

    Raises:
        FileNotFoundError, PermissionError: the command cannot be started.
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd if isinstance(cmd, str) else list(cmd),
        shell=shell,
        env=None if env is None else dict(env),
        cwd=cwd,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.STDOUT if capture else None,
        start_new_session=True,  # its own group: one signal reaches everything it starts
        # a command stopped by SIGINT must take it as Ctrl-C even when tinykit runs where SIGINT
        # is ignored (a background job, CI): the ignore would be inherited across exec
        preexec_fn=_ctrl_c_back if stop_signal == signal.SIGINT else None,
    )
    if on_start is not None:
        _call_on_start(proc, on_start)
    chunks: list[bytes] = []
    reader = _start_reader(proc.stdout, chunks) if capture else None
    timed_out = _wait_or_pass_on(proc, timeout, stop_signal, grace)
    # what it left running in its group ends with it
    end_group(proc.pid, stop_signal or signal.SIGTERM, grace)
    if reader is not None:
        reader.join(GRACE)  # a process in another session may still hold the pipe: not forever
    code = TIMED_OUT if timed_out else shell_code(proc.returncode)
    output = b"".join(chunks).decode(errors="replace")
    return Finished(code, timed_out, time.monotonic() - start, output)


def _ctrl_c_back() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _call_on_start(proc: subprocess.Popen, on_start: Callable[[subprocess.Popen], object]) -> None:
    """Call `on_start`; where it fails, the command's group is killed before the error goes on."""
    try:
        on_start(proc)
    except BaseException:
        end_group(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def _start_reader(stream: IO[bytes] | None, chunks: list[bytes]) -> threading.Thread | None:
    """Read `stream` into `chunks` in a thread: a grandchild left running would hold the pipe
    open past the exit."""
    if stream is None:
        return None
    reader = threading.Thread(target=lambda: chunks.append(stream.read()), daemon=True)
    reader.start()
    return reader


def _wait_or_pass_on(
    proc: subprocess.Popen, timeout: float | None, stop_signal: int | None, grace: float
) -> bool:
    """Wait for the command; whether it ran past `timeout` (its group then ended). Ctrl-C and
    SIGTERM here are passed on to the group, then re-raised once the command is gone."""
    try:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            end_group(proc.pid, stop_signal or signal.SIGTERM, grace)
            proc.wait()
            return True
    except BaseException as e:  # Ctrl-C, SIGTERM: the command gets the same, then we go
        same = signal.SIGINT if type(e) is KeyboardInterrupt else signal.SIGTERM
        end_group(proc.pid, stop_signal or same, grace)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        raise
    return False
