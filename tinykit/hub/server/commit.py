"""Commits that change all or nothing: a whole commit is checked before any file is touched,
then applied to a staged copy of the repo folder, which is swapped in with two renames.

The staged copy hard-links the files it does not change (cheap, even for weights), and every
write replaces a file instead of writing into it, so the live folder is never modified in place.
Staging folders are siblings named `.<repo>.tmp-*`; ones left by a killed server are removed on
the next commit to that repo.
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tinykit.hub.server.guard import bad_request, check_file_path, field

# The commit API's operation keys tinykit applies ("lfsFile" is planned as FILE: its bytes are
# read when the commit is checked).
FILE, DELETED_FILE, DELETED_FOLDER = "file", "deletedFile", "deletedFolder"
# A repo folder may be a git clone: a commit never writes or deletes its git internals (the Hub
# refuses such paths too), whatever the case on a case-insensitive file system.
INTERNAL_DIRS = {".git"}


@dataclass(frozen=True)
class Operation:
    action: str  # FILE, DELETED_FILE or DELETED_FOLDER
    path: str
    data: bytes | None = None


def plan(operations: list, lfs_object: Callable[[str], Path]) -> list[Operation]:
    """Check every operation (shape, path, content) and read what it writes; raises Refused."""
    planned = []
    for op in operations:
        key = field(op, "key", str)
        value = field(op, "value", dict)
        if key in (DELETED_FOLDER, DELETED_FILE):
            path = field(value, "path", str)
            planned.append(Operation(key, _repo_path(path.rstrip("/") or path)))
        elif key == FILE:
            path = _repo_path(field(value, "path", str))
            if field(value, "encoding", str, "base64") != "base64":
                raise bad_request(f"{path}: only base64 content is supported")
            try:
                data = base64.b64decode(field(value, "content", str), validate=True)
            except (binascii.Error, ValueError):
                raise bad_request(f"{path}: content is not valid base64") from None
            planned.append(Operation(FILE, path, data))
        elif key == "lfsFile":
            path = _repo_path(field(value, "path", str))
            blob = lfs_object(field(value, "oid", str))  # validates the oid
            if not blob.is_file():
                raise bad_request(f"{path}: LFS object {blob.name} was never uploaded")
            planned.append(Operation(FILE, path, blob.read_bytes()))
        else:
            raise bad_request(f"unsupported commit operation {key!r}")
    return planned


def _repo_path(path: object) -> str:
    """A checked path inside a repo that is not in its git internals."""
    checked = check_file_path(path)
    if any(part.lower() in INTERNAL_DIRS for part in checked.split("/")):
        raise bad_request(f"path {checked!r} is inside the repo's .git folder: refused")
    return checked


def apply(folder: Path, operations: list[Operation]) -> None:
    """Apply checked operations to `folder` as one change: on any error, `folder` is as before."""
    swap(stage(folder, operations), folder)


def stage(folder: Path, operations: list[Operation]) -> Path:
    """A staged copy of `folder` with `operations` applied; `folder` itself is untouched."""
    parent = folder.parent
    for stale in parent.glob(f".{folder.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    staged = Path(tempfile.mkdtemp(dir=parent, prefix=f".{folder.name}.tmp-"))
    try:
        shutil.copytree(folder, staged, symlinks=True, copy_function=_link, dirs_exist_ok=True)
        for op in operations:
            target = _inside(staged, op.path)
            try:
                _APPLY[op.action](target, op.data)
            except (NotADirectoryError, IsADirectoryError, FileExistsError):
                raise bad_request(f"{op.path}: a file and a folder of that name collide") from None
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return staged


def swap(staged: Path, folder: Path) -> None:
    """Put `staged` in the place of `folder` (two renames), then remove the old copy."""
    old = folder.parent / f"{staged.name}-old"
    try:
        os.rename(folder, old)
        try:
            os.rename(staged, folder)
        except OSError:
            os.rename(old, folder)
            raise
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


def _inside(folder: Path, path: str) -> Path:
    """`folder/path`, refused if it (or a symlink on the way) resolves outside `folder`."""
    target = (folder / path).resolve()
    root = folder.resolve()
    if not target.is_relative_to(root) or target == root:
        raise bad_request(f"path {path!r} leaves the repository")
    return folder / path


def _link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # a file system without hard links: copy
        shutil.copy2(src, dst)


def _write_replacing(target: Path, data: bytes | None) -> None:
    if target.is_dir() and not target.is_symlink():
        raise IsADirectoryError(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # A new file renamed over the old name: never written through a hard link into the live copy.
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data or b"")
    os.replace(tmp, target)


# What each planned operation does to its target in the staged copy.
_APPLY: dict[str, Callable[[Path, bytes | None], None]] = {
    FILE: _write_replacing,
    DELETED_FILE: lambda target, _: target.unlink(missing_ok=True),
    DELETED_FOLDER: lambda target, _: shutil.rmtree(target, ignore_errors=True),
}
