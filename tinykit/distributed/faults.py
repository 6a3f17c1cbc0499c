"""Rank faults on purpose: kill one rank (or make it raise) at a named point of a job.

    dist_launch(train, ckpt_dir, nodes=2, procs_per_node=2, fault=fail(rank=1, at=3))
    tinykit launch --nodes 2 --nproc-per-node 2 --max-restarts 1 --fail rank=1,at=3 \\
        -- python train.py

The training code names its points: `fault_point(step)` at the top of each step, and a fault
`at=3` fires there in rank 1. A fault `at="barrier:2"` fires as the rank enters its 2nd call of
`torch.distributed.barrier`. "kill" is a SIGKILL (what an OOM kill or a lost node looks like);
"raise" raises `InjectedFault`. A fault fires in one attempt only (TORCHELASTIC_RESTART_COUNT
equal to `attempt`, 0 unless set), so the job torchrun restarts runs through and a test can check
that it resumed from its last checkpoint.

The fault travels in the TINYKIT_FAULT variable ("rank=1,at=3,how=kill,attempt=0"): the pool's
ranks arm it before each job; a torchrun program arms it at its first `fault_point` call.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tinykit.errors import InjectedFault, UsageError

FAULT_VAR = "TINYKIT_FAULT"
HOWS = ("kill", "raise")


@dataclass(frozen=True)
class Fault:
    """Kill (or raise in) `rank` at `at`: a step number given to `fault_point`, or "barrier:N"."""

    rank: int
    at: int | str
    how: str = "kill"
    attempt: int = 0

    def __post_init__(self) -> None:
        if self.how not in HOWS:
            raise UsageError(f"Fault how={self.how!r} is unknown; use one of {', '.join(HOWS)}.")
        if self.rank < 0 or self.attempt < 0:
            raise UsageError(f"Fault {self}: rank and attempt must be >= 0.")
        if isinstance(self.at, str) and self.barrier_number is None:
            raise UsageError(
                f"Fault at={self.at!r} is not a point: use a step number (reported by "
                "fault_point(step)) or 'barrier:N' (the rank's Nth torch.distributed.barrier)."
            )

    @property
    def barrier_number(self) -> int | None:
        """N of "barrier:N" ("barrier" alone is 1), None for a step."""
        if not isinstance(self.at, str):
            return None
        match = re.fullmatch(r"barrier(?::([1-9][0-9]*))?", self.at)
        return int(match.group(1) or 1) if match else None

    def __str__(self) -> str:
        return f"rank={self.rank},at={self.at},how={self.how},attempt={self.attempt}"

    @classmethod
    def parse(cls, text: str) -> Fault:
        """From "rank=1,at=3[,how=kill][,attempt=0]" (the CLI's --fail and TINYKIT_FAULT)."""
        fields: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep or key not in ("rank", "at", "how", "attempt"):
                raise UsageError(
                    f"Cannot read the fault {text!r}: {part!r} is not one of rank=, at=, how=, "
                    "attempt=. Example: rank=1,at=3,how=kill"
                )
            fields[key] = int(value) if value.isdigit() else value
        if not {"rank", "at"} <= fields.keys() or isinstance(fields["rank"], str):
            raise UsageError(f"The fault {text!r} needs rank=N and at=POINT, e.g. rank=1,at=3.")
        return cls(**fields)

    @classmethod
    def coerce(cls, value: Fault | str | Mapping[str, Any]) -> Fault:
        """A Fault from itself, its text form or a dict (the marker's `fail=` accepts all)."""
        if isinstance(value, Fault):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        return cls(**value)

    def env(self) -> dict[str, str]:
        return {FAULT_VAR: str(self)}

    def arm(self) -> None:
        """Arm this fault in this process (a rank), replacing any armed one."""
        arm(self)


def fail(rank: int, at: int | str, *, how: str = "kill", attempt: int = 0) -> Fault:
    """A fault that kills `rank` (or, with how="raise", raises `InjectedFault` in it) at `at`.

    Pass it as `fault=` to `run_distributed`/`dist_launch`/`run_torchrun`, as the marker's
    `fail=`, or call `.arm()` on it inside a rank.
    """
    return Fault(rank, at, how, attempt)


_armed: Fault | None = None
_env_read = False  # a torchrun program arms from the environment once, at its first point
_barriers_entered = 0


def arm(fault: Fault | None) -> None:
    """Arm `fault` in this process (None disarms) and restart the barrier count."""
    global _armed, _env_read, _barriers_entered
    _armed, _env_read, _barriers_entered = fault, True, 0
    if fault is not None and fault.barrier_number is not None:
        _hook_barrier()


def arm_from_env() -> None:
    """Arm the fault named by TINYKIT_FAULT, or disarm when it is unset (the pool, per job)."""
    text = os.environ.get(FAULT_VAR)
    arm(Fault.parse(text) if text else None)


def fault_point(step: int) -> None:
    """Report that this rank starts `step`; a fault armed for this rank at this step fires here."""
    if not _env_read:
        arm_from_env()
    if _armed is not None and _armed.at == step and _here(_armed):
        _fire(_armed, f"step {step}")


def _here(fault: Fault) -> bool:
    rank = int(os.environ.get("RANK", "-1"))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    return rank == fault.rank and attempt == fault.attempt


def _fire(fault: Fault, where: str) -> None:
    verb = "killed (SIGKILL)" if fault.how == "kill" else "raises InjectedFault"
    message = f"tinykit: injected fault: rank {fault.rank} {verb} at {where} ({fault})"
    print(message, file=sys.stderr, flush=True)
    if fault.how == "kill":
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    raise InjectedFault(message, rank=fault.rank, at=fault.at)


def _hook_barrier() -> None:
    """Count calls of torch.distributed.barrier (once per process; looked up at call time)."""
    import torch.distributed as dist

    if getattr(dist.barrier, "_tinykit_counted", False):
        return
    original = dist.barrier

    @functools.wraps(original)
    def barrier(*args: Any, **kwargs: Any) -> Any:
        global _barriers_entered
        _barriers_entered += 1
        fault = _armed
        if fault is not None and fault.barrier_number == _barriers_entered and _here(fault):
            _fire(fault, f"barrier {_barriers_entered}")
        return original(*args, **kwargs)

    barrier._tinykit_counted = True  # type: ignore[attr-defined]
    dist.barrier = barrier
