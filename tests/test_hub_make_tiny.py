"""make-tiny from `org/name` through the loopback Hub: the same artifact as from the local folder,
no weight ever requested, the commit sha in the manifest, and one-line errors from the CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from _hub_files import CONFIGS, NATIVE, REMOTE_ONLY, repo_id
from conftest import HUB_FILES, REPO

from tinykit.errors import UnsupportedModelError
from tinykit.hub.client import download_source, push_folder, use_endpoint
from tinykit.hub.server import serve
from tinykit.model.build import make_tiny

SOURCE_ONLY = ("command", "source")  # manifest keys that name the source, so differ by design


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """`tinykit hub serve ../shared/hub-files`, in-process, with a fresh Hub cache."""
    cache = tmp_path_factory.mktemp("hf-cache")
    with serve(HUB_FILES) as server, use_endpoint(server.endpoint, cache_dir=cache):
        yield server


@pytest.fixture(scope="module")
def builds(hub, tmp_path_factory):
    """Every native dev-set repo built twice: from its local folder and from its Hub id."""
    out = tmp_path_factory.mktemp("builds")
    return {
        repo_id(f): (
            make_tiny(f, out / "local" / f.name),
            make_tiny(repo_id(f), out / "hub" / f.name),
        )
        for f in NATIVE
    }


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("folder", NATIVE, ids=repo_id)
def test_hub_id_builds_the_same_files_as_the_local_folder(folder, builds, hub):
    local, remote = builds[repo_id(folder)]
    local_files, hub_files = _files(local.path), _files(remote.path)
    assert local_files.keys() == hub_files.keys()
    for name in local_files.keys() - {"README.md", "tinykit.json"}:  # these name the source
        assert local_files[name] == hub_files[name], name
    local_manifest = json.loads(local_files["tinykit.json"])
    hub_manifest = json.loads(hub_files["tinykit.json"])
    for manifest in (local_manifest, hub_manifest):
        manifest["files"].pop("README.md")
    assert {k: v for k, v in hub_manifest.items() if k not in SOURCE_ONLY} == {
        k: v for k, v in local_manifest.items() if k not in SOURCE_ONLY
    }
    source = hub_manifest["source"]
    assert (source["kind"], source["name"]) == ("hub", repo_id(folder))
    assert source["revision"] == hub.store.snapshot("model", repo_id(folder)).sha


def test_no_weight_file_was_requested_for_the_whole_dev_set(builds, hub):
    assert len(builds) == 25
    assert hub.log.files_requested()  # the sweep did go through the Hub
    assert hub.log.weight_files_requested() == []


def test_remote_code_repo_fails_through_the_hub_as_it_does_locally(hub, tmp_path):
    assert {"THUDM/chatglm3-6b"} == REMOTE_ONLY and len(CONFIGS) == 26
    for source in ("THUDM/chatglm3-6b", HUB_FILES / "THUDM/chatglm3-6b"):
        with pytest.raises(UnsupportedModelError, match="--trust-remote-code"):
            make_tiny(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- the CLI, a fresh interpreter per call (HF_* env vars are read at import) -----------------


def _make_tiny(*args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    command = [sys.executable, "-m", "tinykit", "make-tiny", *args]
    return subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=300)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_builds_offline_from_the_cache_what_the_hub_build_made(tiny_hub, builds, tmp_path):
    tiny_hub.add_model("Qwen/Qwen3-8B", HUB_FILES / "Qwen/Qwen3-8B")
    download_source("Qwen/Qwen3-8B")  # fills this test's cache, which the subprocess inherits
    requests = len(tiny_hub.log)
    offline = _make_tiny("Qwen/Qwen3-8B", "-o", str(tmp_path / "offline"), HF_HUB_OFFLINE="1")
    assert offline.returncode == 0, offline.stderr
    assert len(tiny_hub.log) == requests  # offline: not one request
    # The commit sha is derived from the content, so both servers gave the same one: the
    # offline CLI build equals the in-process build through the Hub, manifest included.
    _, through_hub = builds["Qwen/Qwen3-8B"]
    assert _files(tmp_path / "offline") == _files(through_hub.path)


ERRORS = {
    "missing repo": (
        ["org/does-not-exist"],
        {},
        "HubError: Hub repo 'org/does-not-exist' was not found",
    ),
    "gated repo": (["Qwen/Qwen3-8B"], {}, "HubError: Hub repo 'Qwen/Qwen3-8B' is gated"),
    "bad revision": (["Qwen/Qwen3-8B@v9"], {}, "HubError: Revision 'v9' does not exist"),
    "unreachable": (
        ["Qwen/Qwen3-8B"],
        {"HF_ENDPOINT": "closed"},
        "HubError: Could not reach the Hub",
    ),
    "offline, not cached": (
        ["Qwen/Qwen3-8B"],
        {"HF_HUB_OFFLINE": "1"},
        "OfflineCacheMiss: Hub repo 'Qwen/Qwen3-8B'",
    ),
}


@pytest.mark.parametrize("case", ERRORS, ids=list(ERRORS))
def test_cli_hub_failures_are_one_line_errors_with_exit_3(case, tiny_hub, tmp_path):
    args, env, message = ERRORS[case]
    tiny_hub.add_model("Qwen/Qwen3-8B", HUB_FILES / "Qwen/Qwen3-8B")
    if case == "gated repo":
        tiny_hub.gate("Qwen/Qwen3-8B")
    if env.get("HF_ENDPOINT") == "closed":
        env = {"HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"}
    result = _make_tiny(*args, "-o", str(tmp_path / "out"), **env)
    assert result.returncode == 3
    *stages, error = result.stderr.splitlines()  # stage lines ("tinykit: resolving ..") first
    assert all(s.startswith("tinykit: ") and "error" not in s for s in stages), result.stderr
    assert error.startswith(f"tinykit: error: {message}"), result.stderr  # one line, no traceback
    assert not (tmp_path / "out").exists()  # nothing half-written
    if case == "gated repo":
        assert "hf auth login" in result.stderr and "HF_TOKEN" in result.stderr


def test_a_built_fixture_pushes_with_its_card_and_loads_by_id(tiny_hub, builds):
    import torch
    from huggingface_hub import hf_hub_download
    from transformers import AutoModelForCausalLM

    local, _ = builds["Qwen/Qwen3-8B"]
    url = push_folder(local.path, "tinykit-fixtures/tiny-qwen3")
    assert url.endswith(tiny_hub.store.snapshot("model", "tinykit-fixtures/tiny-qwen3").sha)
    card = hf_hub_download("tinykit-fixtures/tiny-qwen3", "README.md")
    assert Path(card).read_bytes() == (local.path / "README.md").read_bytes()
    served = AutoModelForCausalLM.from_pretrained("tinykit-fixtures/tiny-qwen3").state_dict()
    direct = AutoModelForCausalLM.from_pretrained(local.path).state_dict()
    assert served.keys() == direct.keys()
    assert all(torch.equal(served[k], direct[k]) for k in direct)
