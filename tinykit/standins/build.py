"""build_standins: every repo of a manifest, built in one process into a folder `hub serve` serves.

    report = tinykit.build_standins("tests/clients/peft-standins.toml", "hub")
    # hub/<org>/<name>/...                         each model at main
    # hub/datasets/<org>/<name>/...                each dataset at main
    # hub/_revisions/<type>/<org>/<name>/<branch>/ other branches (refs/pr/1 ...)

One process pays the torch/transformers imports once (a CLI call per repo spends most of its
10-30 s there). Each entry goes through the artifact cache (`tinykit.artifacts.cache`), keyed
like a fixture plus the content of any file option (a chat template edited in place makes a
new key), so a second build of the same manifest copies cached folders and takes seconds. The
whole tree is staged and renamed into place: a failing entry leaves no half-built hub folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinykit._files import output_errors, replace_folder
from tinykit._progress import stage
from tinykit.artifacts.kinds import KINDS, artifact_key, build_artifact
from tinykit.errors import TinykitError
from tinykit.hub.layout import repo_folder, stray_files
from tinykit.standins.manifest import RENAMED, Entry, Manifest, load_manifest, resolve_path


@dataclass(frozen=True)
class EntryReport:
    """What one manifest entry became."""

    repo_id: str
    kind: str
    revision: str
    path: Path  # the folder inside the hub tree
    cached: bool  # found in the artifact cache, not built now
    seconds: float
    bytes: int
    detail: str  # the model class, or the dataset's splits

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "path": str(self.path)}

    def line(self) -> str:
        at = "" if self.revision == "main" else f"@{self.revision}"
        how = "cached" if self.cached else "built"
        return (
            f"{self.repo_id}{at}: {self.kind.replace('_', ' ')}, {self.detail}, "
            f"{self.bytes:,} bytes, {how} in {self.seconds:.1f} s"
        )


@dataclass
class StandinsReport:
    """Every entry's report, the hub folder, and the whole build's wall time."""

    out: Path
    entries: list[EntryReport] = field(default_factory=list)
    seconds: float = 0.0
    failed: list[str] = field(default_factory=list)
    """With keep_going: one line per entry that did not build, naming it and why."""

    @property
    def built(self) -> int:
        return sum(not e.cached for e in self.entries)

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "seconds": round(self.seconds, 3),
            "built": self.built,
            "cached": len(self.entries) - self.built,
            "entries": [e.to_dict() for e in self.entries],
            "failed": self.failed,
        }


def build_standins(
    manifest: str | os.PathLike[str] | Manifest,
    out: str | os.PathLike[str],
    *,
    force: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    keep_going: bool = False,
) -> StandinsReport:
    """Build every entry of `manifest` into the hub folder `out`; return the per-entry report.

    Args:
        manifest: a manifest file (see `tinykit.standins.manifest`) or a parsed `Manifest`.
        out: the hub folder to write; missing or empty, unless `force`.
        force: replace a non-empty `out`.
        cache_dir: the artifact cache (default: TINYKIT_CACHE, else ~/.cache/tinykit).
        keep_going: an entry that fails to build is left out and listed in `report.failed`
            (its entry and the error, one line each) instead of stopping the build: one run
            builds every good entry and names every bad one.

    Raises:
        UsageError: a bad manifest or entry (the message names the entry), or a bad `out`.
        Any builder error, its message prefixed with the entry it came from (without
        keep_going).
    """
    from tinykit.artifacts.cache import Cache

    started = time.perf_counter()
    parsed = manifest if isinstance(manifest, Manifest) else load_manifest(manifest)
    target = Path(out)
    cache = Cache(cache_dir)
    report = StandinsReport(target)
    # --force replaces a hub tree an earlier build wrote, never the manifest, its sources or
    # the cache, nor a folder with other files
    inputs = [cache.root, *_local_inputs(parsed)]
    with (
        output_errors(target),
        replace_folder(target, force=force, keep=inputs, built=_hub_tree) as staging,
    ):
        failures = report.failed if keep_going else None
        for entry, revision, built, cached, seconds in built_entries(parsed, cache, failures):
            folder = repo_folder(staging, entry.repo_type, entry.repo_id, revision)
            folder.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(built, folder)  # copies: the cache's folders stay untouched
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
            detail = KINDS[entry.kind].describe(folder)
            where = repo_folder(target, entry.repo_type, entry.repo_id, revision)
            report.entries.append(
                EntryReport(
                    entry.repo_id, entry.kind, revision, where, cached, seconds, size, detail
                )
            )
    report.seconds = time.perf_counter() - started
    return report


def _hub_tree(folder: Path) -> str | None:
    """None when `folder` is a hub tree (every file in a repo folder), else why it is not."""
    stray = stray_files(folder)
    if not stray:
        return None
    more = f" and {len(stray) - 3} more" if len(stray) > 3 else ""
    return f"it holds files outside any repo folder ({', '.join(stray[:3])}{more})"


def _local_inputs(manifest: Manifest) -> list[Path]:
    """The manifest file and every local folder or file its entries read."""
    found = [manifest.path] if manifest.path is not None else []
    for entry in manifest.entries:
        files = KINDS[entry.kind].file_options
        for value in [entry.source, *(v for k, v in entry.options.items() if k in files)]:
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, str) and item:
                    with contextlib.suppress(TinykitError):  # a bad pkg: path fails its build
                        path = Path(resolve_path(item, manifest.base))
                        if path.exists():
                            found.append(path)
    return found


def built_entries(
    manifest: Manifest, cache: Any, failures: list[str] | None = None
) -> Iterator[tuple[Entry, str, Path, bool, float]]:
    """Build (or find in `cache`) each entry at each branch, in manifest order, with a stage
    line `[n/N]` each: `(entry, revision, cached folder, was cached, seconds)`. With a
    `failures` list, an entry that fails is appended there (one line) and skipped."""
    jobs = [(e, rev, opts) for e in manifest.entries for rev, opts in _branches(e)]
    for n, (entry, revision, options) in enumerate(jobs, 1):
        at = "" if revision == "main" else f"@{revision}"
        stage(f"[{n}/{len(jobs)}] {entry.repo_id}{at} ({entry.kind}: {_shown(entry.source)})")
        started = time.perf_counter()
        try:
            built, cached = _build_entry(entry, options, manifest.base, cache)
        except Exception as e:  # keep going: any builder failure is this entry's finding
            if failures is None:
                raise
            text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            shown = (
                text
                if isinstance(e, TinykitError)
                else f"{entry.where}: {type(e).__name__}: {text}"
            )
            failures.append(shown + ("" if revision == "main" else f" (branch {revision})"))
            stage(f"[{n}/{len(jobs)}] {entry.repo_id}{at} FAILED: {shown}")
            continue
        yield entry, revision, built, cached, time.perf_counter() - started


def _branches(entry: Entry) -> list[tuple[str, dict[str, Any]]]:
    return [("main", entry.options)] + [
        (name, {**entry.options, **_renamed(extra)}) for name, extra in entry.revisions.items()
    ]


def _renamed(options: dict[str, Any]) -> dict[str, Any]:
    return {RENAMED.get(k, k): v for k, v in options.items()}


def _build_entry(
    entry: Entry, options: dict[str, Any], base: Path, cache: Any
) -> tuple[Path, bool]:
    """The entry's cached folder (built on a miss), and whether it was in the cache already.

    File options (a chat template, a tokenizer folder) are read relative to the manifest and
    key by their content: the same path with new bytes is a new stand-in.
    """
    files = KINDS[entry.kind].file_options
    spec = {k: resolve_path(v, base) if k in files else v for k, v in options.items()}
    try:
        cached = cache.lookup(artifact_key(entry.kind, entry.source, spec, cache, base))
        return build_artifact(entry.kind, entry.source, spec, cache, base), cached is not None
    except TinykitError as e:  # the builder's own message, with the entry it belongs to
        e.args = (f"{entry.where}: {e}",)
        raise


def _shown(source: Any) -> str:
    return "features" if isinstance(source, dict) else str(source)
