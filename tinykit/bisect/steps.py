"""Run a bisect predicate (a shell command) and sort its result into good / bad / skip / timeout.

The conventions are git bisect's: exit 0 is good, 125 is "cannot test this one" (skip), any other
exit is bad. A `--skip-on` regex found in the output also skips (e.g. an ImportError unrelated to
the bug). `repeat` runs the command N times: a step that both passes and fails is *flaky* and is
reported as such instead of being guessed either way.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from tinykit._procs import run_command

__all__ = ["GOOD", "BAD", "SKIP", "TIMEOUT", "FLAKY", "Run", "Step", "run_step"]

GOOD, BAD, SKIP, TIMEOUT, FLAKY = "good", "bad", "skip", "timeout", "flaky"
TAIL_CHARS = 2000


@dataclass
class Run:
    exit_code: int | None  # None: killed on timeout
    seconds: float
    outcome: str
    tail: str


@dataclass
class Step:
    """One tested point (a version or a commit) and every run of the command there."""

    point: str
    outcome: str
    command: str
    runs: list[Run] = field(default_factory=list)
    setup_seconds: float = 0.0
    note: str = ""
    subject: str = ""  # a commit's subject line

    @property
    def seconds(self) -> float:
        return self.setup_seconds + sum(r.seconds for r in self.runs)


def command_text(cmd: Sequence[str]) -> str:
    """One argument runs through the shell (pipes, &&); several are an argv, shown quoted."""
    return cmd[0] if len(cmd) == 1 else shlex.join(cmd)


def run_once(
    cmd: Sequence[str],
    env: dict[str, str],
    *,
    cwd: str | None = None,
    timeout: float | None = None,
    skip_on: str | None = None,
) -> Run:
    # Its own process group: a timeout, Ctrl-C or SIGTERM ends the whole tree (pytest workers,
    # torchrun ranks...), and what it left running after it exited ends with it.
    try:
        done = run_command(
            cmd[0] if len(cmd) == 1 else cmd,
            shell=len(cmd) == 1,
            env=env,
            cwd=cwd,
            timeout=timeout,
            capture=True,
        )
    except OSError as e:  # not found, not executable: the step cannot be tested
        return Run(None, 0.0, SKIP, f"cannot run {command_text(cmd)}: {e.strerror or e}")
    out = done.output
    if done.timed_out:
        return Run(None, done.seconds, TIMEOUT, out[-TAIL_CHARS:])
    code = done.returncode
    if code == 0:
        outcome = GOOD
    elif code == 125 or (skip_on and re.search(skip_on, out or "")):
        outcome = SKIP
    else:
        outcome = BAD
    return Run(code, done.seconds, outcome, out[-TAIL_CHARS:])


def combine(outcomes: Sequence[str]) -> str:
    """One verdict for repeated runs: unanimous, else flaky when good and bad both occurred."""
    kinds = set(outcomes)
    if len(kinds) == 1:
        return outcomes[0]
    if {GOOD, BAD} <= kinds:
        return FLAKY
    if TIMEOUT in kinds:
        return TIMEOUT
    return SKIP


def run_step(
    point: str,
    cmd: Sequence[str],
    env: dict[str, str],
    *,
    repeat: int = 1,
    cwd: str | None = None,
    timeout: float | None = None,
    skip_on: str | None = None,
) -> Step:
    runs = [
        run_once(cmd, env, cwd=cwd, timeout=timeout, skip_on=skip_on) for _ in range(max(1, repeat))
    ]
    return Step(point, combine([r.outcome for r in runs]), command_text(cmd), runs)
