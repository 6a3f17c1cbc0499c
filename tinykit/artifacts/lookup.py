"""Find a tiny artifact's folder by fixture name or spec, outside pytest too.

    >>> path = tinykit.fixture_path("tiny-llama")                 # a shipped named fixture
    >>> path = tinykit.fixture_path("qwen3_moe", layers=2)        # ad hoc, as make_tiny takes it
    >>> path = tinykit.fixture_path("tiny-mine", fixtures="fixtures")  # a repo's own fixtures/*.toml

The pytest fixtures (``tiny_model`` ...) resolve their arguments here too, so a name means the
same artifact in a test, a script and ``tinykit fixtures build``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tinykit.artifacts.cache import Cache
from tinykit.artifacts.kinds import KINDS
from tinykit.artifacts.named import FixtureSpec, build_one, load_specs
from tinykit.errors import UsageError

PathLike = str | os.PathLike[str]


def known_specs(folders: Iterable[PathLike] = ()) -> dict[str, FixtureSpec]:
    """The shipped named fixtures, then those of ``folders``: a repo's name shadows a shipped one."""
    specs = load_specs()
    for folder in folders:
        if not Path(folder).is_dir():
            raise UsageError(
                f"Fixture folder {folder} does not exist. Create it with *.toml fixture specs, "
                "or fix the tinykit_fixtures ini option."
            )
        specs.update(load_specs(folder))
    return specs


def resolve(
    kinds: tuple[str, ...], source: Any, spec: dict[str, Any], folders: Iterable[PathLike] = ()
) -> FixtureSpec:
    """What to build: the named fixture ``source`` names (if no spec is given) if it is one of
    ``kinds``, else ad hoc: a features dict for the first of ``kinds`` built from features
    (a synthetic dataset), anything else for ``kinds[0]``."""
    if isinstance(source, str) and not spec and (named := known_specs(folders).get(source)):
        if named.kind not in kinds:
            raise UsageError(
                f"Fixture {source!r} ({named.file}) is a {named.kind}, not a {kinds[0]}. "
                f"Request it with the {KINDS[named.kind].fixture} fixture."
            )
        return named
    inline = [k for k in kinds if KINDS[k].features_source] if isinstance(source, dict) else []
    return FixtureSpec("", (inline or kinds)[0], source, spec)


def fixture_path(
    name_or_source: Any,
    /,
    *,
    kind: str = "model",
    fixtures: PathLike | Iterable[PathLike] = (),
    cache_dir: PathLike | None = None,
    **spec: Any,
) -> Path:
    """The cached folder of a named fixture or of an ad hoc spec, built on a cache miss.

    Args:
        name_or_source: a named fixture (shipped, or in ``fixtures``), or what the builder of
            ``kind`` takes (a model_type, Hub id or folder; a features dict for a dataset).
        kind: builder for an ad hoc source (model, tokenizer, dataset, synthetic_dataset); a
            named fixture brings its own.
        fixtures: this repo's fixture folder(s) of ``*.toml`` specs.
        cache_dir: the artifact cache (default: TINYKIT_CACHE, else ~/.cache/tinykit).
        **spec: the builder's options (``layers=2, hidden=64, ...``).
    """
    if kind not in KINDS:
        raise UsageError(f"fixture_path(kind={kind!r}) is unknown. Use one of {sorted(KINDS)}.")
    folders = [fixtures] if isinstance(fixtures, str | os.PathLike) else list(fixtures)
    kinds = (kind, *(k for k in KINDS if k != kind))  # a name may be of any kind
    return build_one(resolve(kinds, name_or_source, spec, folders), Cache(cache_dir))
