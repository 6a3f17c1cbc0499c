"""Content-addressed cache of built tiny artifacts, shared by processes and xdist workers.

An artifact (a tiny model, tokenizer or dataset folder) is stored under
``<root>/artifacts/<key>/`` where ``key`` is the sha256 of what determines its bytes: the
source and its revision, the spec, and the versions of tinykit, transformers, tokenizers and
torch. A build happens under a file lock (``<root>/locks/<key>.lock``) into a temporary folder
next to the target, which is renamed into place only once complete, so concurrent workers
build each key once and never see half-written folders.

The root is, in order: the ``root`` argument (pytest ``--tinykit-cache-dir``), ``TINYKIT_CACHE``,
``~/.cache/tinykit``.

    >>> cache = Cache()
    >>> path = cache.get_or_build(cache.key("model", "qwen3_moe", {"layers": 2}), build_fn)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from filelock import FileLock

from tinykit.errors import UsageError

# Packages whose version changes the bytes of a built artifact.
KEYED_PACKAGES = ("tinykit", "transformers", "tokenizers", "torch")
META_FILE = "tinykit-cache.json"  # written beside the artifact's files, last, before the rename
BUILD_LOG = "builds.jsonl"  # one line per build actually performed (not per cache hit)
# kind -> public builder `fn(source, out=folder, **spec)`, imported on first use
BUILDERS = {
    "model": "make_tiny",
    "tokenizer": "make_tiny_tokenizer",
    "dataset": "make_tiny_dataset",
    "synthetic_dataset": "make_synthetic_dataset",  # source: a datasets.Features dict
}


def default_root() -> Path:
    """The cache root when none is given: ``TINYKIT_CACHE`` or ``~/.cache/tinykit``."""
    env = os.environ.get("TINYKIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tinykit"


def package_versions(names: tuple[str, ...] = KEYED_PACKAGES) -> dict[str, str]:
    """Installed versions, read from package metadata so that nothing heavy is imported."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


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


def artifact_name(kind: str, source: Any) -> str:
    """A readable folder name that depends only on the key's inputs: ``tiny-<source name>``."""
    if not isinstance(source, (str, os.PathLike)):
        return f"tiny-{kind.replace('_', '-')}"
    return "tiny-" + (Path(str(source).rstrip("/")).name or kind)


def tree_digest(folder: Path) -> str:
    """sha256 over every file's relative path and sha256, in sorted order."""
    h = hashlib.sha256()
    for rel, digest in sorted(file_hashes(folder).items()):
        h.update(f"{rel}\0{digest}\n".encode())
    return h.hexdigest()


def file_hashes(folder: Path, skip: tuple[str, ...] = (META_FILE,)) -> dict[str, str]:
    """``{relative posix path: sha256}`` for every file under ``folder``."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name not in skip:
            out[path.relative_to(folder).as_posix()] = sha256_file(path)
    return out


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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


class Cache:
    """A content-addressed artifact cache rooted at ``root`` (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).expanduser() if root else default_root()

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
    ) -> str:
        """The sha256 key of an artifact: kind + source + revision + spec + package versions.

        ``content`` is where the source's files are when ``source`` is a relative path.
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
            "versions": package_versions(),
            "tinykit_source": tinykit_source_digest(),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    def path(self, key: str) -> Path:
        return self.artifacts / key

    def lookup(self, key: str) -> Path | None:
        """The artifact folder for ``key`` if it is fully built, else None."""
        path = self.path(key)
        return path if (path / META_FILE).is_file() else None

    def get_or_build(
        self,
        key: str,
        build: Callable[[Path], object],
        *,
        kind: str = "artifact",
        source: str = "",
        spec: Mapping[str, Any] | None = None,
        name: str = "artifact",
    ) -> Path:
        """Return the folder for ``key``, calling ``build(folder)`` once if it is missing.

        ``build`` writes the artifact's files into the (empty, existing) folder it is given,
        ``<tmp>/<name>``: builders that record their output folder's name (dataset cards do)
        thus see the same name on every machine, and the bytes stay reproducible. Under the
        lock a second process waits, then finds the finished folder.
        """
        if found := self.lookup(key):
            return found
        (self.root / "locks").mkdir(parents=True, exist_ok=True)
        self.artifacts.mkdir(parents=True, exist_ok=True)
        with FileLock(self.root / "locks" / f"{key}.lock"):
            if found := self.lookup(key):
                return found
            return self._build(key, build, name, kind=kind, source=source, spec=dict(spec or {}))

    def _build(self, key: str, build: Callable[[Path], object], name: str, **meta: Any) -> Path:
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:12]}-", dir=self.artifacts))
        try:
            work = tmp / name
            work.mkdir()
            start = time.perf_counter()
            build(work)
            work.chmod(0o755)  # builders may swap in a private mkdtemp folder; the cache is shared
            seconds = time.perf_counter() - start
            record = {
                **meta,
                "key": key,
                "versions": package_versions(),
                "built_at": time.time(),
                "build_seconds": round(seconds, 4),
                "pid": os.getpid(),
                "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
            }
            (work / META_FILE).write_text(json.dumps(record, indent=2, sort_keys=True))
            final = self.path(key)
            if final.exists():  # a stale, unfinished folder (no META_FILE) from a killed build
                shutil.rmtree(final)
            os.replace(work, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        with open(self.root / BUILD_LOG, "a") as log:
            logged = {k: record[k] for k in ("key", "kind", "source", "worker", "pid")}
            log.write(json.dumps(logged) + "\n")
        return final

    def build(
        self,
        kind: str,
        source: Any,
        spec: Mapping[str, Any],
        base: Path | None = None,
    ) -> Path:
        """The cached folder of ``tinykit.<builder>(source, **spec)``, built once per key.

        ``kind`` is one of ``BUILDERS``; a ``revision`` in the spec is part of the key. A
        relative folder ``source`` is resolved against ``base`` and passed to the builder as
        written, run from ``base``: builders record the source path in their provenance, and a
        relative one keeps the bytes the same on every machine.
        """
        if kind not in BUILDERS:
            raise UsageError(f"Unknown artifact kind {kind!r}. Expected one of {sorted(BUILDERS)}.")
        spec = dict(spec)
        keyed = base / source if base is not None and isinstance(source, str) else source
        key = self.key(kind, source, spec, revision=spec.get("revision"), content=keyed)

        def run_builder(out: Path) -> None:
            import tinykit

            out.rmdir()  # builders refuse an existing output folder and create it atomically
            with contextlib.chdir(base or Path.cwd()):
                getattr(tinykit, BUILDERS[kind])(source, out=out, **spec)

        inline = isinstance(source, (dict, list))
        shown = json.dumps(source, sort_keys=True) if inline else str(source)
        return self.get_or_build(
            key, run_builder, kind=kind, source=shown, spec=spec, name=artifact_name(kind, source)
        )

    def builds(self) -> list[dict[str, Any]]:
        """Every build performed in this cache, oldest first (cache hits are not logged)."""
        log = self.root / BUILD_LOG
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def ls(self) -> list[CacheEntry]:
        """Every complete artifact, newest first."""
        entries = []
        for meta_path in self.artifacts.glob(f"*/{META_FILE}"):
            meta = json.loads(meta_path.read_text())
            folder = meta_path.parent
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
            entries.append(
                CacheEntry(
                    key=folder.name,
                    kind=meta.get("kind", "artifact"),
                    source=meta.get("source", ""),
                    spec=meta.get("spec", {}),
                    versions=meta.get("versions", {}),
                    size_bytes=size,
                    built_at=meta.get("built_at", 0.0),
                    build_seconds=meta.get("build_seconds", 0.0),
                    path=folder,
                )
            )
        return sorted(entries, key=lambda e: e.built_at, reverse=True)

    def clear(self, keys: list[str] | None = None) -> int:
        """Delete all artifacts, or those whose key starts with one of ``keys``; return how many."""
        removed = 0
        if not self.artifacts.is_dir():
            return 0
        (self.root / "locks").mkdir(parents=True, exist_ok=True)
        for folder in sorted(self.artifacts.iterdir()):
            if folder.name.startswith(".tmp-"):  # a build in progress owns it
                continue
            if keys is not None and not any(folder.name.startswith(k) for k in keys):
                continue
            with FileLock(self.root / "locks" / f"{folder.name}.lock"):
                shutil.rmtree(folder, ignore_errors=True)
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
