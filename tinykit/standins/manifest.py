"""Stand-in manifests: which Hub repos a test suite needs, and how tinykit builds each one.

    [defaults]                      # merged under every model entry (any make-tiny option)
    seed = 0

    [models."peft-internal-testing/tiny-random-BertForSequenceClassification"]
    source = "bert"                 # a model_type, a folder (relative to this file) or a Hub id
    class = "BertForSequenceClassification"
    num_labels = 2                  # ... and any other make-tiny option: hidden, layers, vocab,
    mode = "tiny"                   # mode, task, exact_vocab, preset, tokenizer, chat_template
    revisions = ["refs/pr/1"]       # other branches with the same files

    [models."org/phi-3-style"]      # a tokenizer composed from parts, no folder made by hand:
    source = "microsoft/Phi-3-mini-128k-instruct"
    tokenizer = { vocab = "meta-llama/Llama-2-7b-hf", tokens = "microsoft/Phi-3-mini-128k-instruct" }
    add_tokens = ["<think>", "</think>"]                # (template = FILE replaces the template)
    special_tokens = { pad_token = "<pad>" }

    [models."org/name".revisions."v2"]   # or a branch with its own options on top
    seed = 1

    [datasets."org/chat"]
    source = "data/chat"            # make-tiny-dataset source (folder, Hub id, data files)
    rows = { train = 17, test = 2 } # an int, or rows per split
    configs = ["default"]
    synthetic = true                # draw rows with make-synthetic-dataset instead
    # features = { text = { dtype = "string", _type = "Value" } }  (synthetic, from Features)

    [datasets."org/multi"]          # synthetic, a schema and row counts per config
    configs.sst2 = { features = { text = { dtype = "string", _type = "Value" } }, rows = { train = 17, test = 2 } }
    configs.sst5 = { features = { label = { dtype = "int64", _type = "Value" } }, rows = 4 }

Parsing checks the shape and every option name here, before anything is built, and names the
entry and field of the first problem in one line. Option values are checked by the builders
themselves (`Kind.normalise`, `tinykit.artifacts.kinds`), so a manifest accepts exactly what
`make_tiny`, `make_tiny_dataset` and `make_synthetic_dataset` accept.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinykit.artifacts.kinds import KINDS
from tinykit.errors import UsageError
from tinykit.hub.layout import RESERVED_ORGS

# section -> the kind (and repo type) of its entries; [defaults] apply to DEFAULTS_SECTION's
SECTIONS = {"models": "model", "datasets": "dataset"}
SECTION_OF = {repo_type: section for section, repo_type in SECTIONS.items()}
DEFAULTS_SECTION = "models"
# manifest spelling -> builder keyword (`class` is a Python keyword)
RENAMED = {"class": "model_class"}
PACKAGE_PREFIX = "pkg:"  # a file option inside an installed package: pkg:PACKAGE/path
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENTRY_KEYS = {"source", "revisions", "synthetic"}


@dataclass(frozen=True)
class Entry:
    """One repo to serve: its id, kind, what to build it from, and the branches it is on."""

    repo_id: str
    kind: str  # "model", "dataset" or "synthetic_dataset" (tinykit.artifacts.kinds.KINDS)
    source: Any  # a model_type, folder, Hub id or data files; a Features dict (synthetic)
    options: dict[str, Any]
    revisions: dict[str, dict[str, Any]] = field(default_factory=dict)  # branch -> options

    @property
    def where(self) -> str:
        return f'[{SECTION_OF[self.repo_type]}."{self.repo_id}"]'

    @property
    def repo_type(self) -> str:
        return KINDS[self.kind].repo_type


@dataclass(frozen=True)
class Manifest:
    path: Path | None
    entries: list[Entry]

    @property
    def base(self) -> Path:
        """Where relative paths in the manifest are found: the manifest's folder."""
        return self.path.parent if self.path else Path.cwd()


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read and check a manifest file; UsageError naming the entry and field on a problem."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(
            f'Manifest {str(path)!r} does not exist. Pass a TOML file with [models."org/name"] '
            "entries (write a draft with: tinykit standins discover -o MANIFEST -- CMD)."
        )
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"Manifest {path} is not valid TOML: {e}. Fix the file.") from e
    return parse_manifest(data, path)


def parse_manifest(data: dict[str, Any], path: Path | None = None) -> Manifest:
    """Check a parsed manifest (see the module docstring) and return its entries in file order."""
    shown = str(path) if path else "manifest"
    if unknown := sorted(set(data) - {*SECTIONS, "defaults"}):
        raise UsageError(
            f"{shown}: unknown table [{unknown[0]}]. A manifest has [defaults], "
            '[models."org/name"] and [datasets."org/name"] tables.'
        )
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise UsageError(f"{shown}: [defaults] must be a table of make-tiny options.")
    entries: list[Entry] = []
    seen: set[tuple[str, str]] = set()
    for section, kind in SECTIONS.items():
        tables = data.get(section, {})
        if not isinstance(tables, dict):
            raise UsageError(f'{shown}: {section} must hold tables, e.g. [{section}."org/name"].')
        for repo_id, table in tables.items():
            mine = defaults if section == DEFAULTS_SECTION else {}
            entry = _entry(f'{shown}: [{section}."{repo_id}"]', kind, repo_id, table, mine)
            key = (entry.repo_type, repo_id.lower())  # the Hub matches ids case-insensitively
            if key in seen:
                raise UsageError(f"{shown}: {entry.where} is listed twice. Keep one entry.")
            seen.add(key)
            entries.append(entry)
    if not entries:
        raise UsageError(f'{shown}: no entries. Add [models."org/name"] or [datasets."org/name"].')
    return Manifest(path, entries)


def _entry(where: str, kind: str, repo_id: Any, table: Any, defaults: dict) -> Entry:
    _check_repo_id(where, repo_id)
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table with at least source = ...")
    drawn = KINDS[kind].synthetic
    kind, schema = _kind_and_schema(where, kind, table)
    features = KINDS[kind].features_source and schema is not None
    source = _entry_source(where, table, schema, features=features, drawn=drawn)
    options = {**defaults, **{k: v for k, v in table.items() if k not in _ENTRY_KEYS}}
    if features:
        options.pop(schema)
    options = _check_options(where, kind, options)
    revisions = _revisions(where, kind, table.get("revisions", []))
    return Entry(str(repo_id), kind, source, options, revisions)


def _check_repo_id(where: str, repo_id: Any) -> None:
    if not _REPO_ID.match(str(repo_id)):
        raise UsageError(
            f"{where}: {repo_id!r} is not a Hub repo id. Write it as org/name "
            '(letters, digits, ".", "_", "-").'
        )
    if str(repo_id).split("/")[0].lower() in RESERVED_ORGS:
        raise UsageError(
            f"{where}: {repo_id!r} is not a Hub repo id: {str(repo_id).split('/')[0]!r} is a "
            "reserved prefix of Hub URLs, not an org (a dataset goes in "
            '[datasets."org/name"]). Use another org.'
        )


def _kind_and_schema(where: str, kind: str, table: dict) -> tuple[str, str | None]:
    """The entry's kind (a dataset whose rows are drawn becomes the synthetic kind) and the
    field holding its schema: `features`, `configs` (a table per config), or None."""
    drawn = KINDS[kind].synthetic
    synthetic = _synthetic(where, table, drawn)
    # configs = { name = { features = ..., rows = ... } }: a schema per config (a list selects)
    per_config = isinstance(table.get("configs"), dict)
    if drawn and (synthetic or "features" in table or per_config):
        kind = drawn  # rows drawn from features, not a shrunk source
    if "features" in table and per_config:
        raise UsageError(
            f"{where}: give features (one config) or configs = {{name = {{features = ...}}}}, "
            "not both."
        )
    return kind, "features" if "features" in table else "configs" if per_config else None


def _synthetic(where: str, table: dict, drawn: str | None) -> bool:
    """The entry's `synthetic` flag: a bool, true only for a kind whose rows can be drawn."""
    synthetic = table.get("synthetic", False)
    if not isinstance(synthetic, bool) or (synthetic and not drawn):
        raise UsageError(f"{where}: field 'synthetic' must be true or false, on datasets only.")
    return synthetic


def _entry_source(
    where: str, table: dict, schema: str | None, *, features: bool, drawn: str | None
) -> Any:
    """What the entry is built from: its `source`, or for rows drawn from features its schema."""
    source: Any = table.get("features") if schema == "features" else table.get("source")
    if schema == "configs" and features:
        source = {"configs": table["configs"]}
    if features and "source" in table:
        raise UsageError(f"{where}: give either source or {schema}, not both.")
    if not isinstance(source, (str, dict)) or source == "":
        raise UsageError(
            f"{where}: field 'source' is missing. Set it to a model_type, a folder or a Hub id"
            + (" (or features = {...} for synthetic rows)." if drawn else ".")
        )
    return source


def _revisions(where: str, kind: str, value: Any) -> dict[str, dict[str, Any]]:
    """`revisions = ["refs/pr/1"]` (same files) or `[...revisions."b"]` tables of options."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = {v: {} for v in value}
    if not isinstance(value, dict):
        raise UsageError(
            f"{where}: field 'revisions' must be a list of branch names ([\"refs/pr/1\"]) "
            "or tables of options per branch."
        )
    for name, options in value.items():
        if not _is_branch_name(name):
            raise UsageError(
                f"{where}: revision {name!r} is not a branch name. Use names like "
                "'v2' or 'refs/pr/1' (main is the entry itself)."
            )
        if not isinstance(options, dict):
            raise UsageError(f"{where}: revisions.{name!r} must be a table of options.")
        _check_options(f"{where} revisions.{name!r}", kind, options)
    return {name: dict(options) for name, options in value.items()}


def _is_branch_name(name: str) -> bool:
    """A branch other than main, with no empty, `.` or `..` part and no backslash."""
    parts = name.split("/")
    return name != "main" and not any(p in ("", ".", "..") for p in parts) and "\\" not in name


def valid_options(kind: str) -> set[str]:
    """The option names a builder of `kind` takes, in manifest spelling (`class`, not model_class)."""
    spelled = {v: k for k, v in RENAMED.items()}
    return {spelled.get(name, name) for name in KINDS[kind].options}


def _check_options(where: str, kind: str, options: dict[str, Any]) -> dict[str, Any]:
    valid = valid_options(kind)
    for name in options:
        if name not in valid:
            from tinykit._suggest import hint

            raise UsageError(
                f"{where}: field {name!r} is not a {kind.replace('_', ' ')} option."
                f"{hint(name, valid)} Valid: {', '.join(sorted(valid | _ENTRY_KEYS))}."
            )
    return {RENAMED.get(k, k): v for k, v in options.items()}


def resolve_path(value: Any, base: Path) -> Any:
    """A relative path option as an absolute one when it exists beside the manifest (each one,
    for a list such as `recipes` or a table such as a composed `tokenizer`); `pkg:PACKAGE/path`
    as the file inside that installed package (a chat template shipped with a library, wherever
    its venv is)."""
    if isinstance(value, list):
        return [resolve_path(v, base) for v in value]
    if isinstance(value, dict):
        return {k: resolve_path(v, base) for k, v in value.items()}
    if isinstance(value, str) and value.startswith(PACKAGE_PREFIX):
        return str(package_file(value))
    if isinstance(value, str) and value and not Path(value).is_absolute():
        return _beside(value, base)
    return value


def _beside(value: str, base: Path) -> str:
    """The relative path `value` as an absolute one where it exists under `base`, else as is."""
    candidate = base / value
    return str(candidate.resolve()) if candidate.exists() else value


def package_file(value: str) -> Path:
    """The file `pkg:PACKAGE/path/inside` names, in the installed package; UsageError if the
    package is not installed or holds no such file."""
    package, _, inside = value.removeprefix(PACKAGE_PREFIX).partition("/")
    roots = _package_roots(package)
    if not roots or not inside:
        raise UsageError(
            f"{value!r}: no installed package {package!r} to read {inside or 'a file'!r} from. "
            "Write pkg:PACKAGE/path/inside/it with an installed package's import name."
        )
    found = next((Path(r) / inside for r in roots if (Path(r) / inside).is_file()), None)
    if found is None:
        raise UsageError(
            f"{value!r}: package {package!r} ({roots[0]}) has no file {inside!r}. Check the path."
        )
    return found


def _package_roots(package: str) -> list[str]:
    """The folders of the installed package `package` (none when it is not installed)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package) if package.isidentifier() else None
    except (ImportError, ValueError):
        spec = None
    return list(spec.submodule_search_locations or []) if spec else []
