"""Outputs are built in a temp sibling and renamed into place, so a failure, a kill or a second
run never leaves a half-written folder under the real name.

    with output_errors(target):
        tmp = staging_folder(target)           # .<name>.tmp-<pid>-XXXX, stale ones removed
        try:
            ...write into tmp...
            move_into_place(tmp, target, overwrite=force)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

Staging names carry the writer's pid: a folder whose writer is gone (killed with SIGKILL, or a
machine reboot) is removed by the next write to the same target, one whose writer still runs is
left to it. OS errors (disk full, read-only, a parent that is a file) become one-line
`SetupError`s naming the target.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil

from tinykit.errors import SetupError, TinykitError, UsageError

_ADVICE = {
    errno.ENOSPC: "free some space or pick another -o",
    errno.EDQUOT: "free some space or pick another -o",
    errno.EACCES: "pick a folder you can write to (-o)",
    errno.EPERM: "pick a folder you can write to (-o)",
    errno.EROFS: "the file system is read-only: pick another -o",
    errno.ENOTDIR: "a parent of it is a file: pick another -o",
    errno.EEXIST: "a file of that name is in the way: remove it or pick another -o",
    errno.ENAMETOOLONG: "pick a shorter -o",
}


@contextlib.contextmanager
def output_errors(target: Path) -> Iterator[None]:
    """OS errors while writing `target` become one-line SetupErrors (exit 3); errors about other
    paths (a missing source file, say) pass through untouched."""
    try:
        yield
    except TinykitError:
        raise
    except OSError as e:
        if not _about_output(e, target) and not _disk_full(e):
            raise
        code = errno.ENOSPC if _disk_full(e) else e.errno or 0
        reason = os.strerror(code) if code else type(e).__name__
        raise SetupError(
            f"Cannot write {str(target)!r}: {reason}. Nothing was left there; "
            f"{_ADVICE.get(code, 'check the folder and retry')}."
        ) from e
    except Exception as e:
        if not _disk_full(e):
            raise
        raise SetupError(
            f"Cannot write {str(target)!r}: no space left on device. Nothing was left there; "
            f"{_ADVICE[errno.ENOSPC]}."
        ) from e


def _disk_full(e: BaseException) -> bool:
    # pyarrow and safetensors (Rust) report a full disk in their own exceptions, errno-less
    text = str(e)
    return getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or any(
        s in text for s in ("No space left on device", "StorageFull", "os error 28")
    )


def _about_output(e: OSError, target: Path) -> bool:
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return True  # whatever file it names, the write failed
    names = [n for n in (e.filename, e.filename2) if n is not None]
    parent = Path(os.path.abspath(target)).parent
    return any(Path(os.path.abspath(os.fsdecode(n))).is_relative_to(parent) for n in names)


def staging_folder(target: Path) -> Path:
    """A new empty `.<name>.tmp-<pid>-*` sibling of `target`; stale ones are removed first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(target)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent))


def remove_stale(target: Path) -> None:
    for stale in target.parent.glob(f".{target.name}.tmp-*"):
        pid = stale.name[len(f".{target.name}.tmp-") :].split("-", 1)[0]
        if not pid.isdigit() or not psutil.pid_exists(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def move_into_place(tmp: Path, target: Path, *, overwrite: bool) -> None:
    """Rename `tmp` to `target`. An existing target is swapped out (overwrite) or refused; an
    empty folder is replaced (a rename over an empty folder is atomic)."""
    occupied = target.exists() and not (target.is_dir() and not any(target.iterdir()))
    if occupied and not overwrite:
        raise UsageError(
            f"{target} was written by another run meanwhile. Pass --force to replace it, "
            "or run one at a time."
        )
    trash = None
    if occupied:
        trash = Path(
            tempfile.mkdtemp(prefix=f".{target.name}.tmp-{os.getpid()}-", dir=target.parent)
        )
        with contextlib.suppress(FileNotFoundError):  # another run moved it away first
            target.rename(trash / "old")
    try:
        tmp.rename(target)
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        raise UsageError(
            f"{target} was written by another run at the same time. Run one at a time, "
            "then rerun this one."
        ) from e
    finally:
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
