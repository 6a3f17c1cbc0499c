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

    Picklable: a copy sent to a rank process keeps the cache root and fixture folders and drops
    the loaded objects, so the rank finds the built folder in the cache and loads its own.
    """

    def __init__(
        self,
        wrap: Callable[[Any, Path], Any],
        kinds: tuple[str, ...],
        cache: Cache,
        folders: tuple[Path, ...],
        load: Callable[[Path], Any],
        loaded: dict,
        private_copy: bool = True,
    ) -> None:
        self.wrap, self.kinds, self.load, self.private_copy = wrap, kinds, load, private_copy
        self.cache_root, self.folders, self.loaded = cache.root, folders, loaded

    def __call__(self, source: Any, **spec: Any) -> Any:
        path = build_one(resolve(self.kinds, source, spec, self.folders), Cache(self.cache_root))
        if (self.kinds[0], str(path)) not in self.loaded:
            self.loaded[self.kinds[0], str(path)] = self.load(path)
        obj = self.loaded[self.kinds[0], str(path)]
        return self.wrap(copy.deepcopy(obj) if self.private_copy else obj, path)

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
    folders = tinykit_fixture_folders
    return Factory(TinyModel, ("model",), tinykit_cache, folders, _load_model, tinykit_loaded)


@pytest.fixture
def tiny_tokenizer(
    tinykit_cache: Cache, tinykit_loaded: dict, tinykit_fixture_folders: tuple[Path, ...]
) -> Callable[..., TinyTokenizer]:
    """Factory: ``tiny_tokenizer(source, **spec)`` -> ``TinyTokenizer(tokenizer, path)``.

    ``source`` is a shipped model fixture name (its tiny tokenizer: ``len(tok) == vocab_size``)
    or a tokenizer folder for ``tinykit.make_tiny_tokenizer`` (spec ``vocab=...``).
    """
    kinds, folders = ("tokenizer", "model"), tinykit_fixture_folders
    return Factory(TinyTokenizer, kinds, tinykit_cache, folders, load_tokenizer, tinykit_loaded)


@pytest.fixture
def tiny_dataset(
    tinykit_cache: Cache, tinykit_loaded: dict, tinykit_fixture_folders: tuple[Path, ...]
) -> Callable[..., TinyDataset]:
    """Factory: ``tiny_dataset(source, **spec)`` -> ``TinyDataset(dataset_dict, path)``.

    ``source`` is a shipped fixture name (``"tiny-chat"``), a ``datasets.Features`` dict
    (synthetic rows; spec ``rows``, ``seed``) or what ``tinykit.make_tiny_dataset`` takes.
    """
    # Arrow-backed datasets are immutable (map/filter return new ones): share, do not copy.
    kinds, folders = ("dataset", "synthetic_dataset"), tinykit_fixture_folders
    return Factory(
        TinyDataset, kinds, tinykit_cache, folders, load_dataset, tinykit_loaded, private_copy=False
    )


def _load_model(path: Path) -> Any:
    from tinykit.model.load import load_model

    return load_model(path)


def load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def load_dataset(path: Path) -> Any:
    import datasets

    return datasets.load_dataset(str(path))
