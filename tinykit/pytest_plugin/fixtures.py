"""Fixtures over the public API: cached tiny models, tokenizers and datasets; seed; device.

Each artifact is built once per cache key (see tinykit.artifacts.cache) on disk, shared by all xdist
workers and later sessions, and loaded once per session into memory. ``tiny_model`` hands
every test its own deep copy, so a test that trains the model cannot leak into another.

    def test_step(tiny_model):
        model, path = tiny_model("qwen3_moe", layers=2, hidden=64)

The factories pickle (a ``tinykit_dist`` test gets them on every rank): what travels is the
cache folder and the fixture folders, and each rank finds the built folder and loads it there.
Named fixtures are tinykit's shipped ones plus the repo's own (ini ``tinykit_fixtures``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tinykit.artifacts.cache import Cache
from tinykit.artifacts.kinds import KINDS
from tinykit.artifacts.lookup import resolve
from tinykit.artifacts.named import build_one


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


@pytest.fixture(scope="session")
def tinykit_fixture_folders(pytestconfig: pytest.Config) -> tuple[Path, ...]:
    """The repo's own named-fixture folders: ini ``tinykit_fixtures``, relative to the ini file."""
    return tuple(pytestconfig.getini("tinykit_fixtures"))


class Factory:
    """``factory(source, **spec)`` -> ``wrap(object, path)``: build once per key, load once.

    ``kind`` (``tinykit.artifacts.kinds.KINDS``) decides which named fixtures it hands out, how
    the built folder is loaded and whether each test gets a private copy. Picklable: a copy
    sent to a rank process keeps the cache root and fixture folders and drops the loaded
    objects, so the rank finds the built folder in the cache and loads its own.
    """

    def __init__(
        self,
        wrap: Callable[[Any, Path], Any],
        kind: str,
        cache: Cache,
        folders: tuple[Path, ...],
        loaded: dict,
    ) -> None:
        self.wrap, self.kind, self.loaded = wrap, KINDS[kind].name, loaded
        self.cache_root, self.folders = cache.root, folders

    def __call__(self, source: Any, **spec: Any) -> Any:
        kind = KINDS[self.kind]
        named = resolve(kind.fixture_kinds, source, spec, self.folders)
        path = build_one(named, Cache(self.cache_root))
        if (kind.name, str(path)) not in self.loaded:
            self.loaded[kind.name, str(path)] = kind.load(path)
        obj = self.loaded[kind.name, str(path)]
        return self.wrap(obj if kind.shared else copy.deepcopy(obj), path)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "loaded": {}}  # models stay here; a rank loads its own


@pytest.fixture
def tiny_model(
    tinykit_cache: Cache, tinykit_loaded: dict, tinykit_fixture_folders: tuple[Path, ...]
) -> Callable[..., TinyModel]:
    """Factory: ``tiny_model(source, **spec)`` -> ``TinyModel(model, path)``, built once per spec.

    ``source`` is a shipped fixture name (``"tiny-qwen3-moe"``, see ``tinykit fixtures build``)
    or what ``tinykit.make_tiny`` takes (a folder, a Hub id or a bare model_type such as
    ``"qwen3_moe"``, with spec ``layers=2, hidden=64, ...``).
    """
    return Factory(TinyModel, "model", tinykit_cache, tinykit_fixture_folders, tinykit_loaded)


@pytest.fixture
def tiny_tokenizer(
    tinykit_cache: Cache, tinykit_loaded: dict, tinykit_fixture_folders: tuple[Path, ...]
) -> Callable[..., TinyTokenizer]:
    """Factory: ``tiny_tokenizer(source, **spec)`` -> ``TinyTokenizer(tokenizer, path)``.

    ``source`` is a shipped model fixture name (its tiny tokenizer: ``len(tok) == vocab_size``)
    or a tokenizer folder for ``tinykit.make_tiny_tokenizer`` (spec ``vocab=...``).
    """
    folders = tinykit_fixture_folders
    return Factory(TinyTokenizer, "tokenizer", tinykit_cache, folders, tinykit_loaded)


@pytest.fixture
def tiny_dataset(
    tinykit_cache: Cache, tinykit_loaded: dict, tinykit_fixture_folders: tuple[Path, ...]
) -> Callable[..., TinyDataset]:
    """Factory: ``tiny_dataset(source, **spec)`` -> ``TinyDataset(dataset_dict, path)``.

    ``source`` is a shipped fixture name (``"tiny-chat"``), a ``datasets.Features`` dict
    (synthetic rows; spec ``rows``, ``seed``) or what ``tinykit.make_tiny_dataset`` takes.
    Datasets are shared between tests, not copied: Arrow-backed datasets are immutable.
    """
    return Factory(TinyDataset, "dataset", tinykit_cache, tinykit_fixture_folders, tinykit_loaded)
