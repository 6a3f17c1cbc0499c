"""Writing outputs safely, and naming their content: the one implementation of each.

- ``atomic_write``, ``atomic_file``: a file appears whole or not at all (temp file beside it,
  then rename); ``check_output_file`` refuses an existing one without ``force`` before any work.
- ``replace_folder``: a folder is staged in a unique temp sibling ``.<name>.tmp-<random>`` and
  renamed into place only when complete; a failure leaves nothing half-written, and two
  writers racing for one target cannot clobber each other (the loser gets a UsageError).
  ``force`` replaces only a folder an earlier build wrote (``check_target``): never the current
  folder or one above it, one holding an input, nor files tinykit did not write.
- ``output_errors``: OS errors while writing an output (disk full, read-only, a parent that is a
  file) become one-line ``SetupError``s naming it; every writer here goes through it.
- Every file and folder written follows the umask (``follow_umask``), as ``open`` would make it:
  temp files are created private, and a fixture folder shared with a container must be readable.
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
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tinykit.errors import SetupError, TinykitError, UsageError

# A staging folder untouched for this long belongs to a killed writer: the next write removes it.
STALE_SECONDS = 600


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """Write ``data`` (str as UTF-8) to ``path`` through a temp file beside it and a rename.

    Raises:
        SetupError: the file cannot be written (disk full, read-only, a parent that is a file).
    """
    if not isinstance(data, (bytes, str)):
        raise TypeError(f"atomic_write writes bytes or str, not {type(data).__name__}")
    payload = data.encode() if isinstance(data, str) else data
    with atomic_file(path) as tmp:
        tmp.write_bytes(payload)
    return Path(path)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp file beside ``path`` for a writer that needs a file name (a plot, a
    safetensors file); it becomes ``path`` when the block ends without an error.

    Raises:
        SetupError: it cannot be written (disk full, read-only, a parent that is a file).
    """
    path = Path(path)
    with output_errors(path):
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        tmp = Path(name)
        try:
            yield tmp
            os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes it private; outputs follow the umask
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def check_output_file(path: str | os.PathLike[str], force: bool, flag: str = "-o") -> Path:
    """Refuse, before any work, an output file that exists (without ``force``), is a folder, or
    whose folder is missing: a hand-edited file is never overwritten silently."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path}: that is a folder. Name a file, e.g. {path}/out.")
    if not path.parent.is_dir():
        raise UsageError(
            f"{flag} {path}: its folder {path.parent} does not exist. Create it first."
        )
    if path.exists() and not force:
        raise UsageError(
            f"{flag} {path}: the file exists. Pass --force to replace it, or pick another path."
        )
    with output_errors(path, flag):  # a read-only or full folder: said now, not after the work
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    return path


def umask() -> int:
    """This process's umask, read without changing it where /proc tells it (else set and reset:
    a moment another thread could write under)."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(folder: Path) -> None:
    """Give ``folder`` and everything in it the modes ``open``/``mkdir`` give under the umask
    (executable files keep their x bits): libraries that write through private temp files
    (safetensors) and ``mkdtemp`` would leave them 0600/0700."""
    mask = umask()
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        if path.is_dir():
            path.chmod(0o777 & ~mask)
        else:
            path.chmod((0o777 if mode & 0o111 else 0o666) & ~mask)


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


# A folder tinykit built carries its provenance: one of these files, or a card tagged tinykit.
PROVENANCE_FILES = ("tinykit.json", "tinykit-tokenizer.json")
CARD_TAG = "\n- tinykit\n"  # in a dataset card's YAML front matter (tags: [tinykit, ...])


def built_by_tinykit(folder: Path) -> str | None:
    """None when ``folder`` is a tree a tinykit build wrote (it holds its provenance file), else
    why not: the default check before ``force`` replaces a folder."""
    if any((folder / name).is_file() for name in PROVENANCE_FILES):
        return None
    card = folder / "README.md"
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = card.read_text(encoding="utf-8")
        if text.startswith("---\n") and CARD_TAG in text.split("\n---", 1)[0] + "\n":
            return None
    return f"it holds no {' or '.join(PROVENANCE_FILES)} (and no dataset card tagged tinykit)"


def check_target(
    target: Path,
    force: bool,
    *,
    keep: Iterable[str | os.PathLike[str]] = (),
    built: Callable[[Path], str | None] = built_by_tinykit,
) -> None:
    """Refuse, before any work, a target that is a file, or a non-empty folder without
    ``force``. With ``force``, refuse one that is the current folder or above it, the home
    folder, holds a path of ``keep`` (the inputs: a manifest, a source, the cache), or that
    ``built`` says tinykit did not build: ``force`` never deletes what tinykit did not create."""
    if target.exists() and not target.is_dir():
        raise UsageError(
            f"Output {str(target)!r} exists and is a file. Pick another -o/--out path."
        )
    if not (target.is_dir() and any(target.iterdir())):
        return
    if not force:
        raise UsageError(
            f"output folder {target} already exists and is not empty. Pass --force "
            "(force=True) to replace it, or pick another -o/--out path."
        )
    here = target.resolve()
    inside = [(Path.cwd(), "the current folder"), (Path.home(), "the home folder")]
    inside += [(Path(p), "an input") for p in keep]
    held = next(((p, what) for p, what in inside if p.resolve().is_relative_to(here)), None)
    why = f"it holds {held[0]} ({held[1]})" if held is not None else built(target)
    if why is not None:
        raise UsageError(
            f"--force will not replace {target}: {why}. It replaces only a folder an earlier "
            "build wrote; pick another -o/--out path, or remove that folder yourself."
        )


@contextlib.contextmanager
def replace_folder(
    target: str | os.PathLike[str],
    *,
    force: bool = False,
    keep: Iterable[str | os.PathLike[str]] = (),
    built: Callable[[Path], str | None] = built_by_tinykit,
) -> Iterator[Path]:
    """Yield an empty staging folder; on success it replaces ``target`` in one rename.

    ``target`` may be missing or an empty folder; a non-empty one needs ``force`` and must pass
    ``check_target`` (``keep``, ``built``). If another writer fills ``target`` while this one
    works, the rename fails and, without ``force``, a UsageError says so: the other writer's
    folder is left whole. OS errors become SetupErrors naming ``target`` (``output_errors``).
    """
    target = Path(target)
    check_target(target, force, keep=keep, built=built)
    with output_errors(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_staging(target)
        staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(target), dir=target.parent))
        try:
            yield staging
            follow_umask(staging)  # mkdtemp and some writers make files private; outputs are not
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


_ADVICE = {  # {flag}: the option that names the output
    errno.ENOSPC: "free some space or pick another {flag}",
    errno.EDQUOT: "free some space or pick another {flag}",
    errno.EACCES: "pick a folder you can write to ({flag})",
    errno.EPERM: "pick a folder you can write to ({flag})",
    errno.EROFS: "the file system is read-only: pick another {flag}",
    errno.ENOTDIR: "a parent of it is a file: pick another {flag}",
    errno.EEXIST: "a file of that name is in the way: remove it or pick another {flag}",
    errno.ENAMETOOLONG: "pick a shorter {flag}",
}


@contextlib.contextmanager
def output_errors(target: str | os.PathLike[str], flag: str = "-o") -> Iterator[None]:
    """OS errors while writing `target` (or inside it) become one-line SetupErrors (exit 3)
    naming it and what to do with `flag`; errors about other paths (a missing source file,
    say) pass through untouched."""
    target = Path(target)
    try:
        yield
    except TinykitError:
        raise
    except OSError as e:
        if not _about_output(e, target) and not _disk_full(e):
            raise
        code = errno.ENOSPC if _disk_full(e) else e.errno or 0
        reason = os.strerror(code) if code else type(e).__name__
        advice = _ADVICE.get(code, "check the folder and retry").format(flag=flag)
        raise SetupError(
            f"Cannot write {str(target)!r}: {reason}. Nothing was left there; {advice}."
        ) from e
    except Exception as e:
        if not _disk_full(e):
            raise
        raise SetupError(
            f"Cannot write {str(target)!r}: no space left on device. Nothing was left there; "
            f"{_ADVICE[errno.ENOSPC].format(flag=flag)}."
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
