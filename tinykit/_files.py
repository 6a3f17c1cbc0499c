"""Writing outputs safely, and naming their content: the one implementation of each.

- ``atomic_write``: a file appears whole or not at all (temp file beside it, then rename).
- ``replace_folder``: a folder is staged in a unique temp sibling ``.<name>.tmp-<random>`` and
  renamed into place only when complete; a failure leaves nothing half-written, and two
  writers racing for one target cannot clobber each other (the loser gets a UsageError).
- ``output_errors``: OS errors while writing an output (disk full, read-only, a parent that is a
  file) become one-line ``SetupError``s naming it.
- ``sha256_file``, ``file_hashes``, ``tree_digest``: the content identity of files and folders,
  used alike for a local source's revision, the cache key and the fixture lock.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tinykit.errors import SetupError, TinykitError, UsageError

# A staging folder untouched for this long belongs to a killed writer: the next write removes it.
STALE_SECONDS = 600


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write ``data`` (str as UTF-8) to ``path`` through a temp file beside it and a rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; outputs are ordinary files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def output_path(out: Any, default: str | os.PathLike[str], what: str = "out") -> Path:
    """``out`` as a Path (``default`` when None); anything else is a UsageError, not a TypeError."""
    if out is None:
        return Path(default)
    if isinstance(out, (str, os.PathLike)) and not isinstance(out, bytes):
        return Path(out)
    raise UsageError(
        f"{what}={out!r} is not a folder path. Pass the output folder as a str or Path "
        "(sizes go in keywords, e.g. vocab=512 or rows=10)."
    )


def check_target(target: Path, force: bool) -> None:
    """Refuse a target that is a file, or a non-empty folder without ``force``, before any work."""
    if target.exists() and not target.is_dir():
        raise UsageError(
            f"Output {str(target)!r} exists and is a file. Pick another -o/--out path."
        )
    if not force and target.is_dir() and any(target.iterdir()):
        raise UsageError(
            f"output folder {target} already exists and is not empty. Pass --force "
            "(force=True) to replace it, or pick another -o/--out path."
        )


@contextlib.contextmanager
def replace_folder(target: str | os.PathLike[str], *, force: bool = False) -> Iterator[Path]:
    """Yield an empty staging folder; on success it replaces ``target`` in one rename.

    ``target`` may be missing or an empty folder; a non-empty one needs ``force``. If another
    writer fills ``target`` while this one works, the rename fails and, without ``force``, a
    UsageError says so: the other writer's folder is left whole.
    """
    target = Path(target)
    check_target(target, force)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(target)
    staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(target), dir=target.parent))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; outputs (and the shared cache) are not
        yield staging
        _rename_into_place(staging, target, force)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _rename_into_place(staging: Path, target: Path, force: bool) -> None:
    for _ in range(3):  # with force, a folder another writer renamed in meanwhile is replaced too
        try:
            os.rename(staging, target)  # POSIX: replaces a missing or empty folder atomically
            return
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if not force:
                raise UsageError(
                    f"output folder {target} appeared meanwhile (another build wrote it); it is "
                    "kept as it is. Pass --force (force=True) to replace it, or pick another -o."
                ) from None
        trash = Path(tempfile.mkdtemp(prefix=_staging_prefix(target), dir=target.parent))
        try:
            with contextlib.suppress(FileNotFoundError):
                target.rename(trash / "old")
            with contextlib.suppress(OSError):  # lost to another writer: try again
                os.rename(staging, target)
                return
        finally:
            shutil.rmtree(trash, ignore_errors=True)
    raise UsageError(f"output folder {target} keeps being rewritten by another build. Retry.")


def _staging_prefix(target: Path) -> str:
    return f".{target.name}.tmp-{os.getpid()}-"  # the pid tells a live writer from a killed one


def remove_stale_staging(target: Path, older_than: float = STALE_SECONDS) -> None:
    """Delete ``.<name>.tmp-*`` siblings of ``target`` left by writers that were killed: their
    pid is gone, or (no pid in the name) they are untouched for ``older_than`` seconds."""
    import psutil

    cutoff = time.time() - older_than
    for old in target.parent.glob(f".{target.name}.tmp-*"):
        pid = old.name[len(f".{target.name}.tmp-") :].split("-", 1)[0]
        with contextlib.suppress(OSError):
            dead = not psutil.pid_exists(int(pid)) if pid.isdigit() else None
            if old.is_dir() and (dead or (dead is None and old.stat().st_mtime < cutoff)):
                shutil.rmtree(old, ignore_errors=True)


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


def sha256_file(path: str | os.PathLike[str]) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def file_hashes(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """``{relative posix path: sha256}`` for every file under ``folder``, sorted."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name not in skip:
            out[path.relative_to(folder).as_posix()] = sha256_file(path)
    return out


def tree_digest(folder: Path, skip: tuple[str, ...] = ()) -> str:
    """sha256 over every file's relative path and sha256, in sorted order: a folder's identity."""
    h = hashlib.sha256()
    for rel, digest in file_hashes(folder, skip).items():
        h.update(f"{rel}\0{digest}\n".encode())
    return h.hexdigest()


class FolderResult:
    """Mixin for a builder's frozen result dataclass: it stands in for its ``path`` folder.

    ``os.fspath(result)``, ``str(result)`` and ``result / "config.json"`` work as on the
    Path that builders returned before they returned results.
    """

    path: Path

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __truediv__(self, other: str | os.PathLike[str]) -> Path:
        return self.path / other
