"""The `tiny_hub` fixture: a loopback Hugging Face Hub for tests, one server per session.

    def test_loads_through_the_hub(tiny_hub, tmp_path):
        tiny_hub.add_model("Qwen/Qwen3-30B-A3B", tmp_path / "built")
        AutoConfig.from_pretrained("Qwen/Qwen3-30B-A3B")        # unchanged production code
        assert not tiny_hub.log.weight_files_requested()

Each test gets an empty view (no repos, faults or gates, an empty request log) and a fresh Hub
download cache, so no cache hit hides a request. Clients imported before the fixture started
are repointed in-process (`tinykit.hub.client.use_endpoint`), and subprocesses inherit HF_ENDPOINT
and HF_TOKEN (the server's write token: pushes need it).
Nothing heavy is imported until a test asks for the fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tinykit.standins.serve import HubServer


@pytest.fixture(scope="session")
def tiny_hub_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    """The session's loopback Hub server; tests use the per-test view `tiny_hub`."""
    from tinykit.standins.serve import HubServer

    with HubServer(tmp_path_factory.mktemp("tiny-hub-root")) as server:
        yield server


@pytest.fixture
def tiny_hub(
    tiny_hub_server: HubServer,
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
) -> Iterator[HubServer]:
    """A loopback Hub with nothing on it yet: `add_model`/`add_dataset`, or every repo of a
    stand-in manifest with `add_manifest(path)` (built once into the artifact cache, then
    only looked up), then assert on `log`.

    Switches for error paths: `gate(repo_id)`, `hide(repo_id[, path])`, `fail(glob, status=)`,
    `slow(seconds, glob)`. Pushes land in a per-test folder, never in a served source folder.
    """
    from tinykit.hub.client import use_endpoint

    cache_dir = pytestconfig.getoption("tinykit_cache_dir", None)
    tiny_hub_server.cache_dir = Path(cache_dir) if cache_dir else None
    base = tmp_path_factory.mktemp("tiny-hub")
    (base / "repos").mkdir()
    tiny_hub_server.reset(base / "repos")
    with use_endpoint(
        tiny_hub_server.endpoint, cache_dir=base / "hf-cache", token=tiny_hub_server.token
    ):
        yield tiny_hub_server
    tiny_hub_server.reset(base / "repos")
