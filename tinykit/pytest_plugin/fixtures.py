"""Fixtures over the public API: cached tiny models, tokenizers and datasets; seed; device.

Each artifact is built once per cache key (see tinykit.artifacts.cache) on disk, shared by all xdist
workers and later sessions, and loaded once per session into memory. ``tiny_model`` hands
every test its own deep copy, so a test that trains the model cannot leak into another.

    def test_step(tiny_model):
        model, path = tiny_model("qwen3_moe", layers=2, hidden=64)
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tinykit.artifacts.cache import Cache
from tinykit.artifacts.named import FixtureSpec, build_one, load_specs
from tinykit.errors import UsageError


class TinyModel(NamedTuple):
    """What ``tiny_model(...)`` returns: the loaded model (a private copy) and its folder."""

    model: Any
    path: Path


class TinyTokenizer(NamedTuple):
    tokenizer: Any
    path: Path


class TinyDataset(NamedTuple):
    dataset: Any
    path: Path


@pytest.fixture(scope="session")
def tinykit_cache(pytestconfig: pytest.Config) -> Cache:
    """The artifact cache: ``--tinykit-cache-dir``, else TINYKIT_CACHE, else ~/.cache/tinykit."""
    return Cache(pytestconfig.getoption("tinykit_cache_dir"))


@pytest.fixture(scope="session")
def tinykit_loaded() -> dict[tuple[str, str], Any]:
    """Objects loaded this session, by (kind, cached folder): the in-memory layer of the cache."""
    return {}


@pytest.fixture
def tinykit_seed(request: pytest.FixtureRequest) -> int:
    """The seed this test runs under (``random``, numpy and torch are already seeded with it)."""
    from tinykit.pytest_plugin import SEED, TEST_SEED

    return request.node.stash.get(TEST_SEED, request.config.stash[SEED])


@pytest.fixture(scope="session")
def tinykit_device() -> str:
    """The device to test on: TINYKIT_DEVICE, else cuda, xpu, mps or cpu (tinykit.testing)."""
    from tinykit.testing import select_device

    return select_device()


def resolve(kinds: tuple[str, ...], source: Any, spec: dict[str, Any]) -> FixtureSpec:
    """What to build: the shipped fixture ``source`` names (if no spec is given), else ad hoc.

    Otherwise a features dict means a synthetic dataset, anything else ``kinds[0]``'s builder.
    """
    if isinstance(source, str) and not spec and (named := load_specs().get(source)):
        if named.kind not in kinds:
            raise UsageError(
                f"Fixture {source!r} ({named.file}) is a {named.kind}, not a {kinds[0]}. "
                f"Request it with the tiny_{named.kind.split('_')[-1]} fixture."
            )
        return named
    if isinstance(source, dict) and "synthetic_dataset" in kinds:
        return FixtureSpec("", "synthetic_dataset", source, spec)
    return FixtureSpec("", kinds[0], source, spec)


def _factory(
    kinds: tuple[str, ...],
    cache: Cache,
    loaded: dict,
    load: Callable[[Path], Any],
    private_copy: bool = True,
) -> Callable:
    def make(source: Any, **spec: Any) -> tuple[Any, Path]:
        path = build_one(resolve(kinds, source, spec), cache)
        if (kinds[0], str(path)) not in loaded:
            loaded[kinds[0], str(path)] = load(path)
        obj = loaded[kinds[0], str(path)]
        return (copy.deepcopy(obj) if private_copy else obj), path

    return make


@pytest.fixture
def tiny_model(tinykit_cache: Cache, tinykit_loaded: dict) -> Callable[..., TinyModel]:
    """Factory: ``tiny_model(source, **spec)`` -> ``TinyModel(model, path)``, built once per spec.

    ``source`` is a shipped fixture name (``"tiny-qwen3-moe"``, see ``tinykit fixtures build``)
    or what ``tinykit.make_tiny`` takes (a folder, a Hub id or a bare model_type such as
    ``"qwen3_moe"``, with spec ``layers=2, hidden=64, ...``).
    """
    make = _factory(("model",), tinykit_cache, tinykit_loaded, load_model)
    return lambda source, **spec: TinyModel(*make(source, **spec))


@pytest.fixture
def tiny_tokenizer(tinykit_cache: Cache, tinykit_loaded: dict) -> Callable[..., TinyTokenizer]:
    """Factory: ``tiny_tokenizer(source, **spec)`` -> ``TinyTokenizer(tokenizer, path)``.

    ``source`` is a shipped model fixture name (its tiny tokenizer: ``len(tok) == vocab_size``)
    or a tokenizer folder for ``tinykit.make_tiny_tokenizer`` (spec ``vocab=...``).
    """
    make = _factory(("tokenizer", "model"), tinykit_cache, tinykit_loaded, load_tokenizer)
    return lambda source, **spec: TinyTokenizer(*make(source, **spec))


@pytest.fixture
def tiny_dataset(tinykit_cache: Cache, tinykit_loaded: dict) -> Callable[..., TinyDataset]:
    """Factory: ``tiny_dataset(source, **spec)`` -> ``TinyDataset(dataset_dict, path)``.

    ``source`` is a shipped fixture name (``"tiny-chat"``), a ``datasets.Features`` dict
    (synthetic rows; spec ``rows``, ``seed``) or what ``tinykit.make_tiny_dataset`` takes.
    """
    # Arrow-backed datasets are immutable (map/filter return new ones): share, do not copy.
    kinds = ("dataset", "synthetic_dataset")
    make = _factory(kinds, tinykit_cache, tinykit_loaded, load_dataset, private_copy=False)
    return lambda source, **spec: TinyDataset(*make(source, **spec))


def load_model(path: Path) -> Any:
    """Load a tiny model folder with the class named in its config (``architectures[0]``)."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(path)
    cls = getattr(transformers, (config.architectures or ["AutoModel"])[0])
    return cls.from_pretrained(path)


def load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def load_dataset(path: Path) -> Any:
    import datasets

    return datasets.load_dataset(str(path))
