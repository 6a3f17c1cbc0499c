"""Named fixture specs (``fixtures/*.toml``) and their lockfile (``fixtures/lock.json``).

Each top-level table of a spec file is one fixture::

    [tiny-qwen3-moe]
    kind = "model"            # model, tokenizer, dataset, synthetic_dataset (kinds.KINDS)
    source = "qwen3_moe"      # what the builder shrinks: a model_type, Hub id, folder or features
    spec = { layers = 2, hidden = 64, seed = 0 }

``lock.json`` records, per fixture, its spec, the sha256 of every built file and the versions
of the packages that decide its kind's bytes (``Kind.versions``). ``verify`` rebuilds
(or reuses the cache) and reports drift precisely: which fixture, which file, old and new
digests, which versions changed.

``lock`` refuses a fixture that fails its own check (``Kind.problems``: a model must pass
``tinykit.verify``, a tokenizer ``check_tokenizer``, a dataset must load): a lock records only
artifacts that work, and a failed lock leaves ``lock.json`` as it was.

Each fixture is built by ``tinykit.artifacts.kinds.build_artifact``, as every other artifact is.

    tinykit fixtures build|verify|lock [NAME ...] [--fresh]
"""

from __future__ import annotations

import json
import os
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinykit._files import atomic_write, file_hashes
from tinykit._progress import steps
from tinykit.artifacts.cache import Cache
from tinykit.artifacts.kinds import KINDS, build_artifact
from tinykit.errors import FixtureDrift, TinyArtifactInvalid, UsageError

LOCK_FILE = "lock.json"


def default_folder() -> Path:
    """``tinykit/fixtures`` in an installed wheel, else ``fixtures/`` at the repository root."""
    package = Path(__file__).resolve().parents[1]
    packaged = package / "fixtures"
    return packaged if packaged.is_dir() else package.parent / "fixtures"


@dataclass(frozen=True)
class FixtureSpec:
    """One named fixture: the builder kind, its source and spec, and the file it came from."""

    name: str
    kind: str
    source: Any
    spec: dict[str, Any] = field(default_factory=dict)
    file: Path | None = None

    def locked(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source, "spec": self.spec}


def load_specs(folder: str | os.PathLike[str] | None = None) -> dict[str, FixtureSpec]:
    """Every fixture spec in ``folder/*.toml`` (default: ``default_folder()``), by name."""
    folder = Path(folder) if folder else default_folder()
    if not folder.is_dir() or not any(folder.glob("*.toml")):
        raise UsageError(
            f"Fixture folder {str(folder)!r} {'holds no *.toml specs' if folder.is_dir() else 'does not exist'}. "
            "Pass --fixtures-dir with the folder of your fixture specs (and lock.json)."
        )
    specs: dict[str, FixtureSpec] = {}
    for path in sorted(folder.glob("*.toml")):
        try:
            tables = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise UsageError(f"Fixture spec file {path} is not valid TOML: {e}. Fix it.") from e
        for name, table in tables.items():
            specs[name] = _spec(name, table, path, specs)
    return specs


def _spec(name: str, table: Any, path: Path, seen: dict[str, FixtureSpec]) -> FixtureSpec:
    where = f"Fixture {name!r} in {path}"
    if name in seen:
        raise UsageError(f"{where} is also defined in {seen[name].file}. Rename one of them.")
    keys = set(table) if isinstance(table, dict) else set()
    if not isinstance(table, dict) or keys - {"kind", "source", "spec"} or "source" not in keys:
        raise UsageError(
            f"{where} must be a table with keys kind, source and optionally spec; got "
            f"{sorted(table) if isinstance(table, dict) else type(table).__name__}. "
            'Write e.g. [name] kind = "model" source = "qwen3" spec = { layers = 2 }.'
        )
    kind = table.get("kind", "model")
    if not isinstance(table.get("spec", {}), dict):
        raise UsageError(f"{where}: spec must be a table, e.g. spec = {{ layers = 2 }}.")
    if not isinstance(kind, str) or kind not in KINDS:
        raise UsageError(f"{where} has kind {kind!r}; expected one of {sorted(KINDS)}.")
    return FixtureSpec(name, kind, table["source"], dict(table.get("spec", {})), path)


def select(specs: dict[str, FixtureSpec], names: list[str] | None) -> list[FixtureSpec]:
    if not names:
        return list(specs.values())
    if unknown := sorted(set(names) - specs.keys()):
        raise UsageError(
            f"Unknown fixture(s) {unknown}. Known: {sorted(specs)}. See fixtures/*.toml."
        )
    return [specs[n] for n in names]


def build_one(spec: FixtureSpec, cache: Cache | None = None) -> Path:
    """The built folder of ``spec``, from the artifact cache (built on a miss)."""
    base = spec.file.parent if spec.file else None  # relative sources: fixtures/sources/...
    return build_artifact(spec.kind, spec.source, spec.spec, cache, base)


def build(
    names: list[str] | None = None,
    folder: str | os.PathLike[str] | None = None,
    cache: Cache | None = None,
) -> dict[str, Path]:
    """Build (or find in the cache) the named fixtures, or all of them; ``{name: folder}``."""
    return dict(_each(select(load_specs(folder), names), cache, "build"))


def _each(specs: list[FixtureSpec], cache: Cache | None, what: str) -> Iterator[tuple[str, Path]]:
    """``(name, built folder)`` of each spec, counted on stderr (a bar on a terminal)."""
    with steps(len(specs), f"fixtures {what}") as step:
        for spec in specs:
            step(spec.name)
            yield spec.name, build_one(spec, cache)


def _hashes(specs: list[FixtureSpec], fresh: bool, cache: Cache | None) -> dict[str, dict]:
    """``{name: {relpath: sha256}}``; ``fresh`` builds in a throwaway cache, not the real one."""
    if fresh:
        with tempfile.TemporaryDirectory(prefix="tinykit-fixtures-") as tmp:
            return _hashes(specs, False, Cache(tmp))
    return {name: file_hashes(path) for name, path in _each(specs, cache, "verify")}


def lock(
    names: list[str] | None = None,
    folder: str | os.PathLike[str] | None = None,
    cache: Cache | None = None,
    fresh: bool = False,
) -> Path:
    """Write ``lock.json`` with the spec and file digests of the named fixtures (or all)."""
    folder = Path(folder) if folder else default_folder()
    specs = select(load_specs(folder), names)
    path = folder / LOCK_FILE
    data = read_lock(folder) if names and path.exists() else {"fixtures": {}}
    by_name = {s.name: s for s in specs}
    if fresh:
        with tempfile.TemporaryDirectory(prefix="tinykit-fixtures-") as tmp:
            built = _checked(specs, Cache(tmp))
    else:
        built = _checked(specs, cache)
    for name, files in built.items():
        versions = KINDS[by_name[name].kind].key_versions()
        data["fixtures"][name] = {**by_name[name].locked(), "files": files, "versions": versions}
    data.pop("versions", None)  # locks before per-fixture versions kept one shared set
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def _checked(specs: list[FixtureSpec], cache: Cache | None) -> dict[str, dict[str, str]]:
    """``{name: {relpath: sha256}}`` of the built fixtures, each of which passed its own check.

    Raises:
        TinyArtifactInvalid: a fixture fails its kind's check; nothing is locked.
    """
    hashes = {}
    by_name = specs_by_name(specs)
    for name, path in _each(specs, cache, "lock"):
        spec = by_name[name]
        if problems := KINDS[spec.kind].problems(path):
            raise TinyArtifactInvalid(
                f"Refusing to lock fixture {spec.name!r} ({path}): it fails its own check: "
                f"{'; '.join(p.rstrip('.') for p in problems[:3])}. lock.json is unchanged; fix "
                f"the spec in {spec.file}, or clear the entry (tinykit cache clear) and rebuild.",
                fixture=spec.name,
                problems=problems,
            )
        hashes[spec.name] = file_hashes(path)
    return hashes


def read_lock(folder: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """``lock.json``, checked: ``{"fixtures": {name: {kind, source, spec, files, versions}}}``;
    a UsageError names the file and the field that is not so (a hand edit, a merge conflict)."""
    path = (Path(folder) if folder else default_folder()) / LOCK_FILE
    if not path.is_file():
        raise UsageError(f"No lockfile at {path}. Create it with: tinykit fixtures lock")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _bad_lock(path, f"it is not readable JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("fixtures"), dict):
        raise _bad_lock(path, "it must be an object whose field 'fixtures' is an object")
    for name, entry in data["fixtures"].items():
        where = f"fixtures.{name}"
        if not isinstance(entry, dict):
            raise _bad_lock(path, f"{where} must be an object")
        for key, kind in (("files", dict), ("versions", dict), ("spec", dict), ("kind", str)):
            if key in entry and not isinstance(entry[key], kind):
                raise _bad_lock(path, f"{where}.{key} must be a JSON {_JSON_NAMES[kind]}")
        if not all(isinstance(v, str) for v in entry.get("files", {}).values()):
            raise _bad_lock(path, f"{where}.files must map file names to sha256 strings")
    if not isinstance(data.get("versions", {}), dict):
        raise _bad_lock(path, "field 'versions' must be an object")
    return data


_JSON_NAMES = {dict: "object", str: "string"}


def _bad_lock(path: Path, why: str) -> UsageError:
    return UsageError(
        f"{path} is not a fixture lock: {why}. Restore it (git checkout {path.name}) or "
        "rewrite it with: tinykit fixtures lock"
    )


def verify(
    names: list[str] | None = None,
    folder: str | os.PathLike[str] | None = None,
    cache: Cache | None = None,
    fresh: bool = False,
) -> dict[str, Any]:
    """Check built fixtures against ``lock.json``; return the report or raise FixtureDrift.

    Raises:
        FixtureDrift: a file's digest, the file set or a spec differs (``.report`` has details).
    """
    locked = read_lock(folder)
    specs = select(load_specs(folder), names)
    drift = []
    for spec in specs:
        if spec.name not in locked["fixtures"]:
            drift.append({"fixture": spec.name, "problem": "not in lock.json"})
    present = [s for s in specs if s.name in locked["fixtures"]]
    versions: dict[str, list[str]] = {}
    for name, files in _hashes(present, fresh, cache).items():
        entry, spec = locked["fixtures"][name], specs_by_name(present)[name]
        drift += fixture_drift(name, entry, spec, files)
        # older locks kept one shared set of versions at the top level
        was = entry.get("versions", locked.get("versions", {}))
        versions.update(version_changes(was, KINDS[spec.kind].key_versions()))
    versions = dict(sorted(versions.items()))
    report = {"checked": [s.name for s in specs], "drift": drift, "version_changes": versions}
    if drift:
        raise FixtureDrift(drift_message(report), report=report)
    return report


def specs_by_name(specs: list[FixtureSpec]) -> dict[str, FixtureSpec]:
    return {s.name: s for s in specs}


def fixture_drift(name: str, locked: dict, spec: FixtureSpec, files: dict[str, str]) -> list[dict]:
    drift: list[dict[str, Any]] = []
    if {k: locked.get(k) for k in ("kind", "source", "spec")} != spec.locked():
        drift.append(
            {
                "fixture": name,
                "problem": "spec changed",
                "locked": {k: locked.get(k) for k in ("kind", "source", "spec")},
                "current": spec.locked(),
            }
        )
    expected = locked.get("files", {})
    for rel in sorted(expected.keys() | files.keys()):
        old, new = expected.get(rel), files.get(rel)
        if old != new:
            problem = "missing" if new is None else "unexpected" if old is None else "changed"
            drift.append(
                {"fixture": name, "file": rel, "problem": problem, "locked": old, "built": new}
            )
    return drift


def version_changes(locked: dict[str, str], current: dict[str, str]) -> dict[str, list[str]]:
    return {
        k: [locked.get(k, "absent"), current.get(k, "absent")]
        for k in sorted(locked.keys() | current.keys())
        if locked.get(k) != current.get(k)
    }


def drift_message(report: dict[str, Any]) -> str:
    lines = []
    for d in report["drift"]:
        if "file" in d:
            lines.append(
                f"{d['fixture']}: {d['file']} {d['problem']} "
                f"(lock {_short(d['locked'])}, built {_short(d['built'])})"
            )
        else:
            lines.append(f"{d['fixture']}: {d['problem']}")
    changed = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in report["version_changes"].items())
    fixtures = sorted({d["fixture"] for d in report["drift"]})
    return (
        f"{len(fixtures)} fixture(s) differ from lock.json: " + "; ".join(lines) + ". "
        f"Versions changed since the lock: {changed or 'none'}. If the change is intended, "
        f"run: tinykit fixtures lock {' '.join(fixtures)}"
    )


def _short(digest: str | None) -> str:
    return digest[:12] if digest else "none"
