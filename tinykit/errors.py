"""Every exception tinykit raises (and its warning), and the CLI exit code each one maps to.

Messages follow one template: what failed (with identifiers). Why (actual vs expected).
What to do next (an exact command, flag or edit).
"""

from __future__ import annotations


class TinykitError(Exception):
    """Root of the hierarchy: `except TinykitError` catches everything tinykit raises."""

    exit_code = 1

    def __init__(self, message: str, **attrs: object) -> None:
        super().__init__(message)
        self.__dict__.update(attrs)

    def __reduce__(self):  # keyword attributes would otherwise be lost across processes
        return (_rebuild, (type(self), str(self), dict(self.__dict__)))


def _rebuild(cls: type[TinykitError], message: str, attrs: dict) -> TinykitError:
    return cls(message, **attrs)


class UsageError(TinykitError, ValueError):
    """A bad argument, option or input; exit 2."""

    exit_code = 2


class ShrinkConstraintError(UsageError):
    """A requested size breaks an architecture invariant (.field, .value, .constraint)."""

    field: str
    value: object
    constraint: str


class UnsupportedModelError(UsageError):
    """The source cannot be shrunk by tinykit (remote code, unknown model_type, no model class)."""


class BisectError(UsageError):
    """A bisect cannot start as asked: bad ends, nothing between them, no command; exit 2."""


class SetupError(TinykitError):
    """The world around the code is not as needed (network, Hub, packages); exit 3."""

    exit_code = 3


class HubError(SetupError, OSError):
    """A Hugging Face Hub request failed (.repo_id, .revision); the cause is kept."""


class OfflineCacheMiss(HubError, FileNotFoundError):
    """Offline mode is on and the files are not in the cache."""


class BisectAborted(SetupError):
    """A bisect stopped on tinykit's own failure (an install tool or git broke), not a verdict."""


class DeviceUnavailableError(SetupError, RuntimeError):
    """The hardware a check needs is missing, or was initialised in the wrong order."""


class ChildProcessFailed(TinykitError, ChildProcessError):
    """A fresh interpreter running a function died, timed out or raised what cannot cross back
    (.returncode, .timed_out, .stderr or .remote_type, .remote_traceback)."""


class CheckFailed(TinykitError, AssertionError):
    """A tinykit check found a real problem; exit 1. An AssertionError so unittest says FAIL."""


class TinyArtifactInvalid(CheckFailed):
    """A built artifact failed its own validation (.report)."""


class NondeterminismError(CheckFailed):
    """Two runs of the same seeded code differ (.first_diff, .seed)."""


class DistributedTestFailed(CheckFailed):
    """One or more ranks failed or timed out (.per_rank, .timed_out)."""

    per_rank: list[dict]
    timed_out: bool


class NumericsError(CheckFailed):
    """A NaN or Inf appeared in a watched model (.report: step, module, tensor, frames; JSON)."""

    report: dict


class MemoryBudgetExceeded(CheckFailed):
    """A tracked block used more memory than its budget (.kind, .used, .budget, .report)."""

    kind: str  # which memory: "host" or "device" (tinykit.memory.track.HOST, DEVICE)
    used: int
    budget: int
    report: dict


class MemoryLeakDetected(CheckFailed):
    """Memory kept growing over repeated calls (.report, a LeakReport)."""


class SnapshotMismatch(CheckFailed):
    """A tensor differs from its golden snapshot."""


class FixtureDrift(CheckFailed):
    """A built fixture's files differ from fixtures/lock.json."""


class CacheEntryCorrupt(SetupError):
    """A cached artifact's files differ from the digests recorded when it was built (.key,
    .problems), and rebuilding is off; exit 3."""


class InjectedFault(TinykitError, RuntimeError):
    """A rank fault injected on purpose by `tinykit.distributed.fail(..., how="raise")` (.rank, .at)."""

    rank: int
    at: int | str


class NumericsWarning(UserWarning):
    """An activation approaches overflow (`warn_above`), or a finding when `abort=False`."""


# The loopback Hub's own two: the server answers them in the Hub's error shape (an HTTP status
# and X-Error-Code), so they never reach a caller and map to no exit code.


class Refused(Exception):
    """A request the server answers with `status` and never acts on."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class HubNotFound(Exception):
    """A lookup failed; `code` is the Hub's X-Error-Code (RepoNotFound, RevisionNotFound, ...)."""

    def __init__(self, code: str, message: str, commit: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.commit = code, message, commit
