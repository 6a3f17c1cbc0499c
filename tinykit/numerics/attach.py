"""Record a whole command without touching its code: `tinykit record -o DIR -- CMD`.

`record_command` runs CMD with two variables set: TINYKIT_RECORD (the recording's options, as
JSON) and PYTHONPATH led by `_startup/`, whose `sitecustomize.py` Python's `site` module runs
at the start of every interpreter the command starts (a .pth file would have to be written into
site-packages, and PYTHONSTARTUP runs only in interactive sessions); it then runs the
sitecustomize it shadows, if there is one. Nothing happens in an interpreter until it imports
torch: then a `tinykit.record()` without a model starts (the first root module with parameters
is the model), and when the interpreter exits its dump is written into a staging folder, unless
it recorded nothing (pip, a shell helper, a DataLoader worker). A process forked from a
recording one stops recording (its records would interleave with its parent's); a spawned one
records on its own. When CMD has ended, the one dump becomes DIR; several (one per process that
ran a model) become DIR/process-N, in the order the processes started recording.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinykit._procs import run_command
from tinykit.errors import UsageError

__all__ = ["ENV", "STARTUP", "CommandRecording", "record_command", "start_from_environment"]

ENV = "TINYKIT_RECORD"
STARTUP = Path(__file__).resolve().parent / "_startup"
TAIL_CHARS = 4000
DUMP_GRACE = 30.0  # seconds a stopped command has to write its dumps before SIGKILL
OPTIONS = ("modules", "what", "steps", "tensors", "max_bytes", "first_step", "hashes")


@dataclass
class CommandRecording:
    """What `record_command` left: the command's exit code and the dumps it wrote."""

    command: list[str]
    exit_code: int | None  # None: killed on timeout
    out: Path
    dumps: list[Path] = field(default_factory=list)  # [out], or out/process-N; [] if none
    seconds: float = 0.0
    tail: str = ""  # the end of the command's output, when it was captured

    @property
    def dump(self) -> Path | None:
        """The one dump (None when the command recorded nothing, or in several processes)."""
        return self.dumps[0] if len(self.dumps) == 1 else None


def record_command(
    cmd: Sequence[str],
    out: str | os.PathLike[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    capture: bool = False,
    **options: Any,
) -> CommandRecording:
    """Run `cmd` (one argument: a shell line) with every Python process in it recorded as
    `tinykit.record(out=...)` would record it; `options` are `record()`'s (modules, what, steps,
    tensors, max_bytes, first_step). `env` is the environment to run it in (default: this
    one); `capture` keeps its output (the end of it in `.tail`) instead of passing it through.

    Raises:
        UsageError: no command, unknown options, or `out` exists and is not an empty folder.
    """
    from tinykit.numerics.record import record

    if not cmd:
        raise UsageError("no command to record. Put it after --, e.g. -- python train.py.")
    if unknown := sorted(set(options) - set(OPTIONS)):
        raise UsageError(f"record_command: unknown option(s) {unknown}. Use {', '.join(OPTIONS)}.")
    # the options are checked here, once, with record()'s own messages
    record(**{**options, "tensors": "stats"})
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"'{out}' exists and is not empty. Pass a new folder or remove it.")
    if not out.parent.is_dir():
        raise UsageError(f"'{out}': its parent folder does not exist. Create it first.")
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    environ = dict(os.environ if env is None else env)
    here = str(Path(__file__).resolve().parents[2])  # so the hook can import this tinykit
    environ[ENV] = json.dumps({"staging": str(staging), "tinykit": here, "options": options})
    old = environ.get("PYTHONPATH")
    environ["PYTHONPATH"] = os.pathsep.join([str(STARTUP)] + ([old] if old else []))
    start = time.perf_counter()
    try:
        code, tail = _run(list(cmd), environ, cwd, timeout, capture)
        dumps = _collect(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return CommandRecording(list(cmd), code, out, dumps, time.perf_counter() - start, tail)


def _run(
    cmd: list[str], env: dict[str, str], cwd: Any, timeout: float | None, capture: bool
) -> tuple[int | None, str]:
    """(exit code, None on timeout; the end of its output). On Ctrl-C, SIGTERM or the timeout
    the command's group gets SIGINT, so the recording processes still write their dumps."""
    finished = run_command(
        cmd[0] if len(cmd) == 1 else cmd,
        shell=len(cmd) == 1,
        env=env,
        cwd=cwd,
        timeout=timeout,
        capture=capture,
        stop_signal=signal.SIGINT,
        grace=DUMP_GRACE,
    )
    return (None if finished.timed_out else finished.returncode), finished.output[-TAIL_CHARS:]


def _started(dump: Path) -> float:
    try:
        return float(json.loads((dump / "manifest.json").read_text())["process"]["started"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def _collect(staging: Path, out: Path) -> list[Path]:
    """Move the finished dumps from the staging folder to `out` (see the module docstring)."""
    dumps = sorted(
        (d for d in staging.iterdir() if not d.name.startswith(".") and d.is_dir()),
        key=_started,
    )
    if not dumps:
        return []
    if out.exists():
        out.rmdir()  # empty, checked before the command ran
    if len(dumps) == 1:
        os.replace(dumps[0], out)
        return [out]
    folder = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    for i, dump in enumerate(dumps):
        os.replace(dump, folder / f"process-{i}")
    os.replace(folder, out)
    return [out / f"process-{i}" for i in range(len(dumps))]


# -- inside each interpreter of the command -------------------------------------------------


def start_from_environment() -> None:
    """Called by `_startup/sitecustomize.py`: record this interpreter once it imports torch."""
    spec = json.loads(os.environ[ENV])
    from tinykit._import_hooks import after_import

    after_import("torch", lambda: _start_or_say(spec))


def _start_or_say(spec: dict[str, Any]) -> None:
    # this runs inside the command's own `import torch`: a failure here must not fail that
    try:
        _start(spec)
    except Exception as e:
        print(
            f"tinykit record: not recording this process: {type(e).__name__}: {e}", file=sys.stderr
        )


def _start(spec: dict[str, Any]) -> None:
    from tinykit.numerics.dumps import DumpWriter
    from tinykit.numerics.record import record

    owner = os.getpid()
    rec = record(out=Path(spec["staging"]) / str(owner), **spec["options"])
    writer = rec.sink
    assert isinstance(writer, DumpWriter)
    writer.manifest["process"] = {"pid": owner, "argv": sys.argv, "started": time.time()}
    rec.__enter__()

    def finish() -> None:
        if os.getpid() != owner or rec not in _recorders:
            return
        _recorders.remove(rec)
        if writer.records or writer.dropped:
            rec.close()
        else:  # nothing was recorded here: no dump
            rec.sink = None
            rec.close()
            writer.abandon()

    def forked() -> None:  # in the child: stop, and leave the parent's files alone
        if rec in _recorders:
            _recorders.remove(rec)
            rec.sink = None
            rec.close()

    _recorders.append(rec)
    atexit.register(finish)

    def flush() -> None:  # before a fork: the child must not inherit buffered lines
        if not writer.index.closed:
            writer.index.flush()

    os.register_at_fork(before=flush, after_in_child=forked)


_recorders: list[Any] = []  # the recording of this interpreter, while it runs
