"""Content-addressed store of built tiny artifacts, shared by processes and xdist workers.

An artifact (a tiny model, tokenizer or dataset folder) is stored as
``<root>/artifacts/<key>/<name>/`` where ``key`` is the sha256 of what determines its bytes:
the kind, the source and its revision, the (normalised) spec, the contents of the files the
spec names (a chat template, a tokenizer folder, recipe files: the kind's ``file_options``),
and the versions of the packages that decide that kind's bytes (``Kind.versions``, in
``tinykit.artifacts.kinds``). ``<name>`` is a readable folder name that depends only on the
key's inputs, so builders that record their output folder's name
write the same bytes on every machine. A build happens under a file lock
(``<root>/locks/<key>.lock``); the artifact is complete once ``<key>/tinykit-cache.json`` is
written (atomically, last), so concurrent workers build each key once and never use a
half-written folder. The store knows no builders and no kinds: ``tinykit.artifacts.kinds``
does, and hands each key its versions and file options.

The meta file records the sha256 of every file of the artifact, and every lookup checks them
(the files are small): an entry that was truncated, edited or lost a file is rebuilt, or, with
rebuilding off (``Cache(rebuild=False)``, ``TINYKIT_CACHE_REBUILD=0``, ``--no-rebuild``), is a
``CacheEntryCorrupt`` error naming the entry and ``tinykit cache clear KEY``.

The root is, in order: the ``root`` argument (pytest ``--tinykit-cache-dir``), ``TINYKIT_CACHE``,
``~/.cache/tinykit``.

    >>> cache = Cache()
    >>> path = cache.get_or_build(cache.key("model", "qwen3_moe", {"layers": 2}), build_fn)
    >>> path = tinykit.artifacts.kinds.build_artifact("model", "qwen3_moe", {"layers": 2})
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from tinykit._files import (
    atomic_write,
    file_hashes,
    follow_umask,
    output_errors,
    sha256_file,
    tree_digest,
)
from tinykit._progress import stage
from tinykit.errors import CacheEntryCorrupt, UsageError

META_FILE = "tinykit-cache.json"  # beside the artifact folder, written last: "complete"
BUILD_LOG = "builds.jsonl"  # one line per build actually performed (not per cache hit)
REBUILD_VAR = "TINYKIT_CACHE_REBUILD"  # "0": a corrupt entry is an error, not rebuilt


def default_root() -> Path:
    """The cache root when none is given: ``TINYKIT_CACHE`` or ``~/.cache/tinykit``."""
    env = os.environ.get("TINYKIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tinykit"


@functools.cache
def tinykit_source_digest() -> str:
    """sha256 of tinykit's own code and recipes: a development checkout changes without a new
    version number, and a stale cached build must not outlive the code that made it."""
    package = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for folder, pattern in (
        (package, "**/*.py"),
        (package.parent / "recipes", "*.toml"),
        (package / "recipes", "*.toml"),
    ):
        for path in sorted(folder.glob(pattern)):
            h.update(f"{path.relative_to(folder).as_posix()}\0{sha256_file(path)}\n".encode())
    return h.hexdigest()


def source_revision(source: Any, revision: str | None = None) -> str:
    """What identifies the source's content: a digest of a local folder's files, else the revision.

    A Hub id without an explicit revision is keyed by ``"main"``: pin a commit sha in the
    spec to be safe against upstream changes.
    """
    if not isinstance(source, (str, os.PathLike)):  # a features dict: it is its own content
        return revision or "inline"
    path = Path(source)
    if path.is_dir():
        return "sha256:" + tree_digest(path)
    return revision or "main"


def option_contents(spec: Mapping[str, Any], file_options: Iterable[str]) -> dict[str, str]:
    """``{"option:path": digest}`` of every local file or folder the ``file_options`` name.

    The same path with new bytes is a new artifact; a value that names nothing local (a Hub
    id, an inline template) is keyed by the spec alone.
    """
    contents = {}
    for option in file_options:
        value = spec.get(option)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, (str, os.PathLike)) and str(item) and Path(item).exists():
                path = Path(item)
                digest = tree_digest(path) if path.is_dir() else sha256_file(path)
                contents[f"{option}:{item}"] = digest
    return contents


def artifact_name(kind: str, source: Any) -> str:
    """A readable folder name that depends only on the key's inputs: ``tiny-<source name>``."""
    if not isinstance(source, (str, os.PathLike)):
        return f"tiny-{kind.replace('_', '-')}"
    return "tiny-" + (Path(str(source).rstrip("/")).name or kind)


@dataclass(frozen=True)
class CacheEntry:
    """One built artifact on disk, as listed by ``tinykit cache ls``."""

    key: str
    kind: str
    source: str
    spec: dict[str, Any]
    versions: dict[str, str]
    size_bytes: int
    built_at: float
    build_seconds: float
    path: Path
    problems: tuple[str, ...] = ()
    """Why the entry is corrupt (files that differ from their recorded digests); empty if intact."""


def read_meta(meta_path: Path) -> dict[str, Any] | None:
    """The entry's meta file as a dict; None when it is missing or unreadable (not complete)."""
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def entry_problems(folder: Path, meta: dict[str, Any] | None) -> list[str]:
    """How the artifact in ``folder`` differs from the digests its meta file recorded."""
    recorded = meta.get("files") if meta else None
    if not isinstance(recorded, dict):
        return ["its metadata records no file digests (unreadable, or an older tinykit)"]
    found = file_hashes(folder) if folder.is_dir() else {}
    problems = []
    for rel in sorted(recorded.keys() | found.keys()):
        if rel not in found:
            problems.append(f"{rel} is missing")
        elif rel not in recorded:
            problems.append(f"{rel} was added")
        elif found[rel] != recorded[rel]:
            problems.append(f"{rel} changed (sha256 {found[rel][:12]}, built {recorded[rel][:12]})")
    return problems


class Cache:
    """A content-addressed artifact cache rooted at ``root`` (see the module docstring).

    ``rebuild``: what to do with an entry whose files differ from their recorded digests:
    rebuild it (default, unless ``TINYKIT_CACHE_REBUILD=0``), or raise ``CacheEntryCorrupt``.
    """

    def __init__(
        self, root: str | os.PathLike[str] | None = None, *, rebuild: bool | None = None
    ) -> None:
        self.root = Path(root).expanduser() if root else default_root()
        self.rebuild = os.environ.get(REBUILD_VAR, "1") != "0" if rebuild is None else rebuild
        if self.root.exists() and not self.root.is_dir():
            raise UsageError(
                f"The artifact cache {str(self.root)!r} is a file, not a folder. Pass a folder "
                "as --cache-dir (or TINYKIT_CACHE), or remove that file."
            )

    def __repr__(self) -> str:
        return f"Cache({str(self.root)!r})"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def key(
        self,
        kind: str,
        source: Any,
        spec: Mapping[str, Any],
        revision: str | None = None,
        content: Any = None,
        *,
        versions: Mapping[str, str] | None = None,
        file_options: Iterable[str] = (),
    ) -> str:
        """The sha256 key of an artifact: kind + source + revision + spec + package versions.

        ``spec`` should be normalised (``Kind.normalise``) so that spelled-out defaults do not
        make a second key. ``content`` is where the source's files are when ``source`` is a
        relative path. ``versions`` are the package versions that decide the kind's bytes;
        files named by the spec's ``file_options`` are keyed by content (``option_contents``).
        """
        try:
            spec_json = json.dumps(dict(spec), sort_keys=True)
        except TypeError as e:
            raise UsageError(
                f"The spec for {kind} {str(source)!r} cannot be used as a cache key. {e}. "
                "Pass only str, int, float, bool, None, lists and dicts in the spec."
            ) from e
        payload = {
            "kind": kind,
            "source": source if isinstance(source, (dict, list)) else str(source),
            "revision": source_revision(source if content is None else content, revision),
            "spec": json.loads(spec_json),
            "versions": dict(versions or {}),
            "tinykit_source": tinykit_source_digest(),
        }
        if contents := option_contents(spec, file_options):
            payload["contents"] = contents
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    def path(self, key: str) -> Path:
        """The folder of ``key``: its meta file and the artifact folder inside."""
        return self.artifacts / key

    def lookup(self, key: str) -> Path | None:
        """The artifact folder for ``key`` if it is fully built and intact, else None.

        Raises:
            CacheEntryCorrupt: the entry's files differ from their digests and rebuilding is off.
        """
        folder, problems = self._check(key)
        if problems and not self.rebuild:
            raise self._corrupt(key, problems)
        return folder

    def _corrupt(self, key: str, problems: list[str]) -> CacheEntryCorrupt:
        short = key[:12]
        return CacheEntryCorrupt(
            f"Cached artifact {short} ({self.path(key)}) is corrupt: {'; '.join(problems[:3])}. "
            f"Rebuilding is off ({REBUILD_VAR}=0 or --no-rebuild). Delete it with "
            f"`tinykit cache clear {short}` (--cache-dir {self.root}) and rerun.",
            key=key,
            problems=problems,
        )

    def _check(self, key: str) -> tuple[Path | None, list[str]]:
        """``(folder, [])`` for an intact entry, ``(None, [])`` for none, else the problems."""
        meta_path = self.path(key) / META_FILE
        if not meta_path.is_file():
            return None, []
        meta = read_meta(meta_path)
        name = meta.get("name") if meta else None
        if not isinstance(name, str) or not name:
            return None, ["its metadata is unreadable or names no artifact folder"]
        folder = self.path(key) / name
        return (None, problems) if (problems := entry_problems(folder, meta)) else (folder, [])

    def get_or_build(
        self,
        key: str,
        build: Callable[[Path], object],
        *,
        kind: str = "artifact",
        source: str = "",
        spec: Mapping[str, Any] | None = None,
        name: str = "artifact",
        versions: Mapping[str, str] | None = None,
    ) -> Path:
        """Return the folder for ``key``, calling ``build(folder)`` once if it is missing.

        ``build`` writes the artifact's files into the (empty, existing) folder it is given,
        ``<key>/<name>``. Under the lock a second process waits, then finds the finished folder.
        ``kind``, ``source``, ``spec`` and ``versions`` are recorded in the meta file.
        """
        if folder := self._check(key)[0]:
            return folder
        with self._writing():
            return self._locked_build(key, build, kind, source, spec, name, versions)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """OS errors writing the cache (read-only, full, a parent that is a file) become one
        SetupError naming the cache root (exit 3)."""
        with output_errors(self.root, flag="--cache-dir (or TINYKIT_CACHE)"):
            yield

    def _locked_build(
        self,
        key: str,
        build: Callable[[Path], object],
        kind: str,
        source: str,
        spec: Mapping[str, Any] | None,
        name: str,
        versions: Mapping[str, str] | None,
    ) -> Path:
        (self.root / "locks").mkdir(parents=True, exist_ok=True)
        self.artifacts.mkdir(parents=True, exist_ok=True)
        with FileLock(self.root / "locks" / f"{key}.lock"):
            # checked again under the lock: another process may have (re)built it meanwhile
            folder, problems = self._check(key)
            if folder:
                return folder
            if problems:
                if not self.rebuild:
                    raise self._corrupt(key, problems)
                stage(f"cache entry {key[:12]} is corrupt ({problems[0]}): rebuilding")
            meta = {"kind": kind, "source": source, "spec": dict(spec or {})}
            return self._build(key, build, name, **meta, versions=dict(versions or {}))

    def _build(self, key: str, build: Callable[[Path], object], name: str, **meta: Any) -> Path:
        folder = self.path(key)
        shutil.rmtree(folder, ignore_errors=True)  # an unfinished build killed before its meta file
        work = folder / name
        work.mkdir(parents=True)
        start = time.perf_counter()
        try:
            build(work)
            follow_umask(folder)  # shared by users and containers: files as the umask says
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        record = {
            **meta,
            "key": key,
            "name": name,
            "built_at": time.time(),
            "build_seconds": round(time.perf_counter() - start, 4),
            "pid": os.getpid(),
            "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
            "files": file_hashes(work),  # checked on every lookup
        }
        atomic_write(folder / META_FILE, json.dumps(record, indent=2, sort_keys=True))
        with open(self.root / BUILD_LOG, "a") as log:
            logged = {k: record[k] for k in ("key", "kind", "source", "worker", "pid")}
            log.write(json.dumps(logged) + "\n")
        return work

    def builds(self) -> list[dict[str, Any]]:
        """Every build performed in this cache, oldest first (cache hits are not logged)."""
        log = self.root / BUILD_LOG
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def ls(self) -> list[CacheEntry]:
        """Every complete artifact, newest first; a corrupt one lists its ``problems``."""
        entries = []
        for meta_path in self.artifacts.glob(f"*/{META_FILE}"):
            meta = read_meta(meta_path) or {}
            name = meta["name"] if isinstance(meta.get("name"), str) else ""
            folder = meta_path.parent / name
            problems = entry_problems(folder, meta) if name else ["its metadata is unreadable"]
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if name else 0
            entries.append(
                CacheEntry(
                    key=meta_path.parent.name,
                    kind=meta.get("kind", "artifact"),
                    source=meta.get("source", ""),
                    spec=meta.get("spec", {}),
                    versions=meta.get("versions", {}),
                    size_bytes=size,
                    built_at=meta.get("built_at", 0.0),
                    build_seconds=meta.get("build_seconds", 0.0),
                    path=folder,
                    problems=tuple(problems),
                )
            )
        return sorted(entries, key=lambda e: e.built_at, reverse=True)

    def clear(self, keys: list[str] | None = None) -> int:
        """Delete all artifacts, or those whose key starts with one of ``keys``; return how many."""
        removed = 0
        if not self.artifacts.is_dir():
            return 0
        with self._writing():
            (self.root / "locks").mkdir(parents=True, exist_ok=True)
            for folder in sorted(self.artifacts.iterdir()):
                if keys is not None and not any(folder.name.startswith(k) for k in keys):
                    continue
                with FileLock(self.root / "locks" / f"{folder.name}.lock"):
                    shutil.rmtree(folder)
                removed += 1
            if keys is None:
                (self.root / BUILD_LOG).unlink(missing_ok=True)
        return removed


def ls(root: str | os.PathLike[str] | None = None) -> list[CacheEntry]:
    """Every artifact in the cache at ``root`` (default: TINYKIT_CACHE or ~/.cache/tinykit)."""
    return Cache(root).ls()


def clear(root: str | os.PathLike[str] | None = None, keys: list[str] | None = None) -> int:
    """Delete cached artifacts (all, or those whose key starts with one of ``keys``)."""
    return Cache(root).clear(keys)
