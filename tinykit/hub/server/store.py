"""The repositories a loopback Hub serves: plain folders, their file hashes, commits and pushes.

A repo is a folder, found either under the served root (`<org>/<name>/` for models,
`datasets/<org>/<name>/`, `spaces/<org>/<name>/`) or mounted explicitly with `RepoStore.mount`
(that is how the `tiny_hub` fixture serves folders from anywhere). Other branches of a repo
are folders under `_revisions/<type>/<org>/<name>/<branch>/` (`refs/pr/1` is three levels
deep: the first folder on a path that holds a file is a branch), or mounts. The layout is
`tinykit.hub.layout`'s. Ids are matched case-insensitively, as the real Hub does.

Commit shas are derived from the content (repo, revision name, every path and blob id), so a
client's cached snapshot goes stale exactly when a served file changes. Pushes write into the
root; a push to a mounted repo first copies it there, so a mounted source is never modified.

Nothing outside the served folders is ever read or written: repo ids are checked part by part
(`guard.check_repo_id`), and every path is resolved and must stay inside the root (or the
mounted folder). Symlinks are resolved and contained: one whose target is inside is served as
that file, one that points outside is left out, as if absent.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tinykit._files import atomic_write
from tinykit.errors import HubNotFound, Refused
from tinykit.hub.layout import REVISIONS_DIR, URL_PREFIX, branches_folder, repo_folder
from tinykit.hub.server import commit as commits
from tinykit.hub.server.guard import bad_request, check_repo_id

# The Hub stores these as LFS objects (the default `.gitattributes` of a new Hub repo), and so
# does every file of 10 MiB or more: they are served with X-Linked-Etag and a CDN redirect.
LFS_SUFFIXES = frozenset(
    {
        ".7z",
        ".arrow",
        ".bin",
        ".bz2",
        ".ckpt",
        ".ftz",
        ".gguf",
        ".gz",
        ".h5",
        ".joblib",
        ".lfs",
        ".mlmodel",
        ".model",
        ".msgpack",
        ".npy",
        ".npz",
        ".onnx",
        ".ot",
        ".parquet",
        ".pb",
        ".pickle",
        ".pkl",
        ".pt",
        ".pth",
        ".rar",
        ".safetensors",
        ".tar",
        ".tflite",
        ".tgz",
        ".wasm",
        ".xz",
        ".zip",
        ".zst",
    }
)
LFS_MIN_SIZE = 10 * 1024 * 1024
_SETTLED_NS = 2_000_000_000
_SKIPPED_DIRS = {".git", ".cache"}  # git internals and huggingface_hub's local_dir metadata


def is_lfs(path: str, size: int) -> bool:
    return size >= LFS_MIN_SIZE or PurePosixPath(path).suffix.lower() in LFS_SUFFIXES


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
    )


@dataclass(frozen=True)
class FileEntry:
    """One file of a snapshot, with the ids the Hub reports for it."""

    path: str
    size: int
    blob_id: str  # git blob sha1 of the content, or of the LFS pointer for LFS files
    sha256: str | None  # set for LFS files only
    local: Path

    def tree_json(self) -> dict:
        item = {"type": "file", "path": self.path, "size": self.size, "oid": self.blob_id}
        if self.sha256:
            pointer_size = len(lfs_pointer(self.sha256, self.size))
            item["lfs"] = {"oid": self.sha256, "size": self.size, "pointerSize": pointer_size}
        return item

    def sibling_json(self) -> dict:
        item = {"rfilename": self.path, "size": self.size, "blobId": self.blob_id}
        if self.sha256:
            pointer_size = len(lfs_pointer(self.sha256, self.size))
            item["lfs"] = {"sha256": self.sha256, "size": self.size, "pointerSize": pointer_size}
        return item


@dataclass(frozen=True)
class Snapshot:
    """A repo at one revision: what every read endpoint answers from."""

    repo_type: str
    repo_id: str  # canonical spelling (as on disk or as mounted)
    revision: str
    sha: str
    files: dict[str, FileEntry]
    gated: bool
    generation: int = 0  # the store's commit count when it was taken (see RepoStore.current)

    def _directory(self, path: str) -> dict:
        return {"type": "directory", "path": path, "oid": self.sha, "size": 0}

    def tree(self, path: str = "", *, recursive: bool = False) -> list[dict]:
        """The tree-listing entries below `path`, as `/api/.../tree/{rev}/{path}` answers."""
        path = path.strip("/")
        prefix = f"{path}/" if path else ""
        below = [f for f in self.files if f.startswith(prefix)]
        if path and not below:
            raise HubNotFound(
                "EntryNotFound", f"{path} does not exist at {self.revision}", self.sha
            )
        entries: dict[str, dict] = {}
        for name in below:
            parts = name[len(prefix) :].split("/")
            for depth in range(1, len(parts)):  # the directories on the way
                if recursive or depth == 1:
                    directory = prefix + "/".join(parts[:depth])
                    entries[directory] = self._directory(directory)
            if recursive or len(parts) == 1:
                entries[name] = self.files[name].tree_json()
        return [entries[k] for k in sorted(entries)]

    def path_info(self, path: str) -> dict | None:
        """The entry at `path` itself (file or directory), as paths-info answers; None if absent."""
        path = path.strip("/")
        if path in self.files:
            return self.files[path].tree_json()
        if not path or any(f.startswith(path + "/") for f in self.files):
            return self._directory(path)
        return None


class RepoStore:
    """Thread-safe view of the served repos. `root` is read and also receives pushes."""

    def __init__(self, root: Path) -> None:
        self._lock = threading.RLock()
        self._repo_locks: dict[str, threading.Lock] = {}
        self._generation = 0  # commits swapped in so far: a snapshot of an older one may be stale
        self._hashes: dict[
            tuple[str, int, int], tuple[str, str]
        ] = {}  # survives resets: pure cache
        self.lfs_objects = Path(tempfile.mkdtemp(prefix="tinykit-hub-lfs-"))
        self.reset(root)

    def reset(self, root: Path) -> None:
        """Serve `root` and nothing else: drop mounts, hidden entries and gates."""
        with self._lock:
            self.root = Path(root)
            self._mounts: dict[tuple[str, str, str], tuple[str, Path]] = {}
            self._hidden: set[tuple[str, str, str | None]] = set()
            self._gates: dict[tuple[str, str], str | None] = {}

    # -- configuration (used by the fixture and by tests) -------------------------------------

    def mount(self, repo_type: str, repo_id: str, folder: Path, revision: str = "main") -> None:
        folder = Path(folder)
        if not folder.is_dir():
            raise NotADirectoryError(f"cannot serve {repo_id!r}: {folder} is not a directory")
        with self._lock:
            self._mounts[(repo_type, repo_id.lower(), revision)] = (repo_id, folder)

    def hide(self, repo_type: str, repo_id: str, path: str | None = None) -> None:
        """Make a repo (path=None) or one of its files answer 404 as if it did not exist."""
        with self._lock:
            self._hidden.add((repo_type, repo_id.lower(), path))

    def gate(self, repo_type: str, repo_id: str, token: str | None = None) -> None:
        """File downloads need `Authorization: Bearer <token>`; token=None: nothing opens them."""
        with self._lock:
            self._gates[(repo_type, repo_id.lower())] = token

    def gate_allows(self, repo_type: str, repo_id: str, authorization: str | None) -> bool:
        key = (repo_type, repo_id.lower())
        if key not in self._gates:
            return True
        token = self._gates[key]
        return token is not None and authorization == f"Bearer {token}"

    # -- reads ---------------------------------------------------------------------------------

    def _locate(self, repo_type: str, repo_id: str, revision: str) -> tuple[str, Path] | None:
        if (repo_type, repo_id.lower(), None) in self._hidden:
            return None
        mounted = self._mounts.get((repo_type, repo_id.lower(), revision))
        if mounted:
            return mounted
        if revision != "main":
            return self._branch_folders(repo_type, repo_id).get(revision)
        if repo_id.count("/") != 1 or repo_id.split("/")[0] == REVISIONS_DIR:
            return None
        try:
            check_repo_id(*repo_id.split("/"))
        except Refused:
            return None  # the handler refuses such ids; here they are simply not served
        base = self.root / URL_PREFIX[repo_type]
        found = base
        for part in repo_id.split("/"):
            match = _child_casefold(found, part)
            if match is None:
                return None
            found = match
        if not found.resolve().is_relative_to(self.root.resolve()):
            return None  # a repo folder that is a symlink to elsewhere: not served
        canonical = "/".join(found.relative_to(base).parts)
        return canonical, found

    def _branch_folders(self, repo_type: str, repo_id: str) -> dict[str, tuple[str, Path]]:
        """The branches other than main served from `_revisions/<type>/<org>/<name>/`."""
        main = self._locate(repo_type, repo_id, "main")
        if main is None:  # a branch is served beside the repo's main folder only
            return {}
        canonical, _ = main
        base = branches_folder(self.root, repo_type, canonical)
        found: dict[str, tuple[str, Path]] = {}
        if not base.is_dir() or not base.resolve().is_relative_to(self.root.resolve()):
            return found
        for dirpath, dirnames, filenames in os.walk(base):
            if Path(dirpath) != base and filenames:
                found[Path(dirpath).relative_to(base).as_posix()] = (canonical, Path(dirpath))
                dirnames.clear()  # a branch's own sub-folders are its files' folders
        return found

    def _revisions(self, repo_type: str, repo_id: str) -> list[str]:
        if (repo_type, repo_id.lower(), None) in self._hidden:
            return []
        names = {rev for (t, rid, rev) in self._mounts if t == repo_type and rid == repo_id.lower()}
        names.update(self._branch_folders(repo_type, repo_id))
        if self._locate(repo_type, repo_id, "main"):
            names.add("main")
        return sorted(names)

    def exists(self, repo_type: str, repo_id: str) -> bool:
        with self._lock:
            return bool(self._revisions(repo_type, repo_id))

    def snapshot(self, repo_type: str, repo_id: str, revision: str = "main") -> Snapshot:
        """The repo at a branch name or a commit sha; raises HubNotFound."""
        with self._lock:
            revisions = self._revisions(repo_type, repo_id)
            if not revisions:
                raise HubNotFound(
                    "RepoNotFound", f"Repository {repo_id!r} ({repo_type}) not found."
                )
            if revision in revisions:
                return self._build(repo_type, repo_id, revision)
            for name in revisions:
                snap = self._build(repo_type, repo_id, name)
                if revision.lower() == snap.sha:
                    return snap
            raise HubNotFound("RevisionNotFound", f"Invalid rev id: {revision}")

    @contextmanager
    def current(self, snap: Snapshot) -> Iterator[Snapshot]:
        """``snap``, or the same branch taken again if a commit was swapped in since, with the
        store locked: a file opened inside is the one the snapshot describes (a commit renames
        the repo folder away and back under this lock, so an open outside it can miss)."""
        with self._lock:
            if snap.generation != self._generation:
                snap = self.snapshot(snap.repo_type, snap.repo_id, snap.revision)
            yield snap

    def _build(self, repo_type: str, repo_id: str, revision: str) -> Snapshot:
        located = self._locate(repo_type, repo_id, revision)
        assert located is not None  # callers only pass revisions from _revisions()
        canonical, folder = located
        hidden = {p for (t, rid, p) in self._hidden if t == repo_type and rid == repo_id.lower()}
        files = {}
        inside = folder.resolve()
        for local in sorted(_walk(folder)):
            path = local.relative_to(folder).as_posix()
            # os.walk does not follow folder symlinks, so only a file symlink can point away
            if path in hidden or (os.path.islink(local) and not _contained(local, inside)):
                continue
            if local.is_file():
                files[path] = self._entry(path, local)
        digest = hashlib.sha1(f"{repo_type}/{canonical}@{revision}\n".encode())
        for entry in files.values():
            digest.update(f"{entry.path}\0{entry.blob_id}\n".encode())
        gated = (repo_type, repo_id.lower()) in self._gates
        return Snapshot(
            repo_type, canonical, revision, digest.hexdigest(), files, gated, self._generation
        )

    def _entry(self, path: str, local: Path) -> FileEntry:
        stat = local.stat()
        key = (str(local), stat.st_size, stat.st_mtime_ns)
        hashes = self._hashes.get(key)
        if hashes is None:  # hashing a 90 MB file costs ~0.3 s: once per version
            blob, content = hashlib.sha1(b"blob %d\0" % stat.st_size), hashlib.sha256()
            with open(local, "rb") as f:
                while chunk := f.read(1 << 20):
                    blob.update(chunk)
                    content.update(chunk)
            hashes = blob.hexdigest(), content.hexdigest()
            # mtime ticks are coarse (ms): a file written again within one tick and at the same
            # size would keep a stale hash, so only files left alone for a while are cached.
            if time.time_ns() - stat.st_mtime_ns > _SETTLED_NS:
                self._hashes[key] = hashes
        blob_sha1, sha256 = hashes
        if is_lfs(path, stat.st_size):
            return FileEntry(
                path, stat.st_size, git_blob_id(lfs_pointer(sha256, stat.st_size)), sha256, local
            )
        return FileEntry(path, stat.st_size, blob_sha1, None, local)

    # -- writes (create-repo, commit, LFS upload) ----------------------------------------------

    def create(self, repo_type: str, repo_id: str) -> bool:
        """Create an empty repo under the root; False if it already exists."""
        check_repo_id(*repo_id.split("/", 1))
        with self._lock:
            if self.exists(repo_type, repo_id):
                return False
            folder = repo_folder(self.root, repo_type, repo_id)
            if not _contained(folder.parent, self.root.resolve()):
                raise bad_request(f"cannot create {repo_id!r}: its folder leaves the root")
            folder.mkdir(parents=True, exist_ok=True)
            return True

    def writable_folder(self, repo_type: str, repo_id: str, revision: str) -> Path:
        """The folder a commit writes into; a mounted repo is copied under the root first."""
        with self._lock:
            snap = self.snapshot(repo_type, repo_id, revision)
            located = self._locate(repo_type, repo_id, snap.revision)
            assert located is not None
            canonical, folder = located
            key = (repo_type, repo_id.lower(), snap.revision)
            if key in self._mounts or snap.revision != "main":
                target = repo_folder(self.root, repo_type, canonical, snap.revision)
                if not target.resolve().is_relative_to(self.root.resolve()):
                    raise bad_request(f"cannot write revision {snap.revision!r}: outside the root")
                if target.resolve() != folder.resolve():
                    shutil.rmtree(target, ignore_errors=True)
                    shutil.copytree(folder, target, ignore=shutil.ignore_patterns(*_SKIPPED_DIRS))
                self._mounts[key] = (canonical, target)
                folder = target
            return folder

    def commit(
        self, repo_type: str, repo_id: str, revision: str, operations: list[dict]
    ) -> Snapshot:
        """Apply ndjson commit operations (file, lfsFile, deletedFile, deletedFolder), all or
        none: the whole commit is checked first, then swapped in (`commit.apply`)."""
        planned = commits.plan(operations, self.lfs_object)
        folder = self.writable_folder(repo_type, repo_id, revision)
        with self._lock:
            repo_lock = self._repo_locks.setdefault(str(folder), threading.Lock())
        # Staging copies the repo: reads (and commits to other repos) go on meanwhile; only
        # the swap itself holds the store lock, so no snapshot sees a half-swapped folder.
        with repo_lock:
            staged = commits.stage(folder, planned)
            with self._lock:
                commits.swap(staged, folder)
                self._generation += 1
                return self.snapshot(repo_type, repo_id, revision)

    def lfs_object(self, oid: str) -> Path:
        if len(oid) != 64 or any(c not in "0123456789abcdef" for c in oid):
            raise bad_request(f"bad LFS oid {oid[:80]!r}: expected 64 lowercase hex digits")
        return self.lfs_objects / oid

    def store_lfs_object(self, oid: str, data: bytes) -> None:
        path = self.lfs_object(oid)
        if hashlib.sha256(data).hexdigest() != oid:
            raise bad_request(f"LFS upload does not match its oid {oid}")
        _write_atomic(path, data)


def _child_casefold(folder: Path, name: str) -> Path | None:
    exact = folder / name
    if exact.is_dir():
        return exact
    if not folder.is_dir():
        return None
    return next(
        (p for p in folder.iterdir() if p.is_dir() and p.name.lower() == name.lower()), None
    )


def _walk(folder: Path):
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d not in _SKIPPED_DIRS]
        for name in filenames:
            yield Path(dirpath) / name


def _contained(path: Path, inside: Path) -> bool:
    return path.resolve().is_relative_to(inside)


def _write_atomic(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, data)
