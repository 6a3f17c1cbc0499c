"""The artifact kinds: every fact about a model, tokenizer, dataset or synthetic dataset, in one row.

    >>> KINDS["model"].options              # what a spec may name: make_tiny's keywords + ShrinkSpec
    >>> path = build_artifact("model", "qwen3_moe", {"layers": 2})   # through the cache

A ``Kind`` holds its builder, the spec options it takes, the files those options may name, the
package versions that decide its bytes, how a built one is checked, loaded and described, and
where a stand-in of it is served. Named fixtures (``tinykit.artifacts.named``), the pytest
factories, ``fixture_path`` and ``build_standins`` all build through ``build_artifact``; any
code that needs a per-kind fact reads ``KINDS[name]``. A new kind is one more ``Kind(...)``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinykit._versions import package_versions
from tinykit.artifacts.cache import Cache, artifact_name
from tinykit.dataset.build import make_tiny_dataset
from tinykit.dataset.synthetic import make_synthetic_dataset
from tinykit.errors import TinykitError, UsageError
from tinykit.model.build import make_tiny
from tinykit.model.spec import ShrinkSpec
from tinykit.tokenizer.build import make_tiny_tokenizer

# Builder keywords that are not part of what is built: never in a spec, never in a key.
_NOT_SPEC = {"force", "display_source", "push_to_hub"}


@dataclass(frozen=True)
class Kind:
    """One kind of tiny artifact (see the module docstring)."""

    name: str
    repo_type: str
    """Where a stand-in of it is served on a Hub: "model" or "dataset" (`tinykit.hub.layout`)."""
    fixture: str
    """The pytest factory that hands it out (`tiny_model`, ...)."""
    build: Callable[..., Any]
    """``build(source, out, **spec)`` writes the artifact into ``out``."""
    versions: tuple[str, ...]
    """The packages whose versions decide its bytes: in its cache key and its lock entry."""
    check: Callable[[Path], list[str]]
    """What is wrong with a built one, [] when it works (raising is a finding too: ``problems``)."""
    load: Callable[[Path], Any]
    """The object a test gets from the built folder."""
    describe: Callable[[Path], str]
    """What a reader checks first in a built one: the model class, the data files."""
    file_options: tuple[str, ...] = ()
    """Options that may name a local file or folder: keyed by its content, relative to a manifest."""
    shrink: type[ShrinkSpec] | None = None
    """A spec dataclass whose fields are options too, put in canonical form by it."""
    display_source: bool = True
    """Its builder records its source: a relative folder is recorded as given (the same bytes
    on every machine), not as the absolute path it was built from."""
    accepts: tuple[str, ...] = ()
    """Other kinds whose named fixtures its fixture also hands out (a model's tokenizer)."""
    synthetic: str | None = None
    """The kind a manifest entry of this kind becomes with ``synthetic = true``."""
    features_source: bool = False
    """Its source may be a ``datasets.Features`` dict (inline, or a manifest's ``features``)."""
    shared: bool = False
    """Loaded objects are immutable: tests share one instead of each getting a deep copy."""

    @property
    def options(self) -> frozenset[str]:
        """Every option a spec of this kind may name."""
        fields = {f.name for f in dataclasses.fields(self.shrink)} if self.shrink else set()
        return frozenset(_keywords(self.build).keys() | fields)

    @property
    def fixture_kinds(self) -> tuple[str, ...]:
        """The kinds of named fixtures its pytest factory hands out, its own first."""
        return (self.name, *self.accepts)

    def key_versions(self) -> dict[str, str]:
        """``{package: installed version}`` of ``versions``."""
        return package_versions(self.versions)

    def normalise(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """``spec`` in canonical form: validated, defaults removed (``{}`` and ``{"hidden": 32}``
        name one model), so that it keys one cache entry. A typo fails here, before any build."""
        spec, shrink = dict(spec), {}
        if self.shrink:
            fields = {f.name for f in dataclasses.fields(self.shrink)}
            mine = {k: v for k, v in spec.items() if k in fields}
            shrink = self.shrink.from_kwargs(**mine).changed()
            spec = {k: v for k, v in spec.items() if k not in fields}
        defaults = _keywords(self.build)
        if unknown := sorted(set(spec) - defaults.keys()):
            raise UsageError(
                f"Unknown {self.name} option(s) {', '.join(unknown)}. "
                f"Valid options: {', '.join(sorted(self.options))}."
            )
        options = {k: v for k, v in spec.items() if not _is_default(v, defaults[k])}
        return dict(sorted({**shrink, **options}.items()))

    def problems(self, path: Path) -> list[str]:
        """``check``, with a folder that cannot even be read as one finding: [] when it works."""
        try:
            return self.check(path)
        except TinykitError as e:
            return [str(e)]
        except Exception as e:  # a folder the loader cannot read at all is the finding
            text = str(e).strip()
            return [f"it does not load: {type(e).__name__}: {text.splitlines()[0] if text else ''}"]


@functools.cache
def _keywords(build: Callable[..., Any]) -> dict[str, Any]:
    """``{option: default}`` of a builder's keyword-only parameters that shape what is built."""
    params = inspect.signature(build).parameters.items()
    return {
        name: p.default
        for name, p in params
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in _NOT_SPEC
    }


def _is_default(value: Any, default: Any) -> bool:
    return (
        value is None or value == default or (isinstance(value, list) and tuple(value) == default)
    )


# -- what each kind checks, loads and shows (heavy imports stay inside) --------------------------


def _check_model(path: Path) -> list[str]:
    from tinykit.model.verify import verify

    return list(verify(path).problems)


def _load_model(path: Path) -> Any:
    from tinykit.model.load import load_model

    return load_model(path)


def _model_classes(path: Path) -> str:
    config = path / "config.json"
    if not config.is_file():
        return "no config.json"
    return ", ".join(json.loads(config.read_text()).get("architectures") or ["no class"])


def _check_tokenizer(path: Path) -> list[str]:
    from tinykit.tokenizer.check import check_tokenizer

    return list(check_tokenizer(path)["problems"])


def _load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _tokenizer_class(path: Path) -> str:
    config = path / "tokenizer_config.json"
    found = json.loads(config.read_text()).get("tokenizer_class") if config.is_file() else None
    return found or "no tokenizer_class"


def _load_dataset(path: Path) -> Any:
    import datasets

    return datasets.load_dataset(str(path))


def _check_dataset(path: Path) -> list[str]:
    """A dataset works when it loads, as the tiny_dataset fixture loads it."""
    import datasets

    bars_were_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # stderr keeps the stage lines and the one error line
    try:
        _load_dataset(path)
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()
    return []


def _data_files(path: Path) -> str:
    data = sorted(p.relative_to(path).as_posix() for p in path.rglob("*.parquet"))
    return f"{len(data)} data file(s)" if data else "no data files"


# -- the kinds --------------------------------------------------------------------------------

# Datasets are written by datasets/pyarrow with media re-encoded by pillow/soundfile; synthetic
# rows are drawn by hypothesis: an upgrade of any of these must not serve a stale artifact.
_TOKENIZER_STACK = ("tinykit", "transformers", "tokenizers", "sentencepiece", "protobuf")
_DATASET_STACK = ("tinykit", "datasets", "pyarrow", "pillow", "soundfile")

MODEL = Kind(
    "model",
    repo_type="model",
    fixture="tiny_model",
    build=make_tiny,
    versions=(*_TOKENIZER_STACK, "torch", "safetensors"),
    check=_check_model,
    load=_load_model,
    describe=_model_classes,
    file_options=("chat_template", "tokenizer", "recipes"),
    shrink=ShrinkSpec,
)
TOKENIZER = Kind(
    "tokenizer",
    repo_type="model",
    fixture="tiny_tokenizer",
    build=make_tiny_tokenizer,
    versions=_TOKENIZER_STACK,
    check=_check_tokenizer,
    load=_load_tokenizer,
    describe=_tokenizer_class,
    display_source=False,  # it records no source
    accepts=("model",),  # tiny_tokenizer("tiny-llama"): the model fixture's tokenizer
)
DATASET = Kind(
    "dataset",
    repo_type="dataset",
    fixture="tiny_dataset",
    build=make_tiny_dataset,
    versions=_DATASET_STACK,
    check=_check_dataset,
    load=_load_dataset,
    describe=_data_files,
    accepts=("synthetic_dataset",),
    synthetic="synthetic_dataset",
    shared=True,  # Arrow-backed: map/filter return new datasets
)
SYNTHETIC_DATASET = Kind(
    "synthetic_dataset",
    repo_type="dataset",
    fixture="tiny_dataset",
    build=make_synthetic_dataset,
    versions=(*_DATASET_STACK, "hypothesis", "numpy"),
    check=_check_dataset,
    load=_load_dataset,
    describe=_data_files,
    features_source=True,
    shared=True,
)
KINDS: dict[str, Kind] = {k.name: k for k in (MODEL, TOKENIZER, DATASET, SYNTHETIC_DATASET)}


def kind_named(name: str) -> Kind:
    """``KINDS[name]``, or a one-line UsageError listing the kinds."""
    if name not in KINDS:
        raise UsageError(f"Unknown artifact kind {name!r}. Expected one of {sorted(KINDS)}.")
    return KINDS[name]


# -- building through the cache -----------------------------------------------------------------


def artifact_key(
    kind: str, source: Any, spec: Mapping[str, Any], cache: Cache, base: Path | None = None
) -> str:
    """The key ``build_artifact`` builds under: look it up to know whether a build is due."""
    return _planned(kind, source, spec, cache, base)[0]


def build_artifact(
    kind: str,
    source: Any,
    spec: Mapping[str, Any],
    cache: Cache | None = None,
    base: Path | None = None,
) -> Path:
    """The cached folder of ``KINDS[kind].build(source, **spec)``, built once per key.

    A relative folder ``source`` is found under ``base``. The builder gets its absolute path,
    and (``Kind.display_source``) records the relative one: the bytes stay the same on every
    machine.

    Raises:
        UsageError: an unknown kind or option (before anything is built); any builder error.
    """
    cache = cache or Cache()
    key, found, spec, where, shown_as = _planned(kind, source, spec, cache, base)

    def run_builder(out: Path) -> None:
        found.build(where, out, **spec, **shown_as)

    inline = isinstance(source, (dict, list))
    return cache.get_or_build(
        key,
        run_builder,
        kind=kind,
        source=json.dumps(source, sort_keys=True) if inline else str(source),
        spec=spec,
        name=artifact_name(kind, source),
        versions=found.key_versions(),
    )


def _planned(
    kind: str, source: Any, spec: Mapping[str, Any], cache: Cache, base: Path | None
) -> tuple[str, Kind, dict[str, Any], Any, dict[str, Any]]:
    """(key, kind, normalised spec, where the source is, the builder's display_source)."""
    found = kind_named(kind)
    spec = found.normalise(spec)
    local = isinstance(source, str) and base is not None and (base / source).exists()
    where = (base / source).resolve() if local and base is not None else source
    key = cache.key(
        kind,
        source,
        spec,
        revision=spec.get("revision"),
        content=where,
        versions=found.key_versions(),
        file_options=found.file_options,
    )
    shown_as = {"display_source": source} if local and found.display_source else {}
    return key, found, spec, where, shown_as
