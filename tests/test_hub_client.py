"""tinykit.hub.client: download_source never fetches weights, push_folder publishes, every Hub failure
becomes one tinykit error. All against the loopback Hub (the public Hub is unreachable here)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HUB_FILES, REPO
from huggingface_hub import HfApi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinykit.errors import HubError, OfflineCacheMiss, UsageError
from tinykit.hub.client import download_source, push_folder, use_endpoint
from tinykit.hub.server import is_weight_file

LLAMA = "meta-llama/Llama-2-7b-hf"
WEIGHTS = ["model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "tf_model.h5"]


@pytest.fixture
def llama_with_weights(tmp_path: Path) -> Path:
    folder = tmp_path / "llama"
    shutil.copytree(HUB_FILES / LLAMA, folder)
    for name in WEIGHTS:
        (folder / name).write_bytes(b"\x01" * 64)
    (folder / "README.md").write_text("---\nlicense: llama2\n---\n")
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    return folder


def test_download_source_gets_configs_and_tokenizer_but_never_weights(tiny_hub, llama_with_weights):
    tiny_hub.add_model(LLAMA, llama_with_weights)
    folder, sha = download_source(LLAMA)
    assert sha == HfApi().model_info(LLAMA).sha == folder.name
    assert sorted(p.name for p in folder.iterdir()) == [
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer.model",
        "tokenizer_config.json",
    ]
    assert (folder / "tokenizer.model").read_bytes() == (
        HUB_FILES / LLAMA / "tokenizer.model"
    ).read_bytes()
    assert tiny_hub.log.weight_files_requested() == []
    assert "model.safetensors.index.json" not in tiny_hub.log.files_requested()


def test_download_source_at_a_revision_returns_that_commit(tiny_hub, llama_with_weights):
    tiny_hub.add_model(LLAMA, llama_with_weights)
    sha = HfApi().model_info(LLAMA).sha
    folder, resolved = download_source(LLAMA, revision=sha)
    assert resolved == sha and (folder / "config.json").is_file()


_NAMES = st.sampled_from(
    [
        "config.json",
        "a.safetensors",
        "b.bin",
        "c.pt",
        "d.gguf",
        "e.onnx",
        "f.msgpack",
        "g.h5",
        "merges.txt",
        "spiece.model",
        "chat_template.jinja",
        "x.safetensors.index.json",
        "vocab.tiktoken",
        "notes.md",
        "script.py",
        "tokenizer.model.v3",
    ]
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(names=st.sets(_NAMES, min_size=1, max_size=8))
def test_download_source_never_requests_a_weight_file_whatever_the_repo_holds(
    tiny_hub, tmp_path_factory, names
):
    folder = tmp_path_factory.mktemp("repo")
    for name in names:
        (folder / name).write_bytes(b"x")
    tiny_hub.log.clear()
    tiny_hub.add_model("org/any", folder)
    wanted = {
        n for n in names if not n.endswith((".md", ".py", ".index.json")) and not is_weight_file(n)
    }
    if not wanted:
        with pytest.raises(HubError, match="holds none of the files tinykit reads"):
            download_source("org/any")
    else:
        got, _ = download_source("org/any")
        assert {p.name for p in got.iterdir()} == wanted
    assert tiny_hub.log.weight_files_requested() == []


def test_push_folder_creates_uploads_and_redownloads(tiny_hub, tmp_path):
    built = tmp_path / "built"
    built.mkdir()
    (built / "config.json").write_text('{"model_type": "llama"}')
    (built / "README.md").write_text("# tiny llama\n")
    (built / "model.safetensors").write_bytes(b"\x02" * 128)
    url = push_folder(built, "tinykit/tiny-llama")
    sha = HfApi().model_info("tinykit/tiny-llama").sha
    assert url.endswith(sha)
    assert push_folder(built, "tinykit/tiny-llama")  # exist_ok: a second push works
    again, _ = download_source("tinykit/tiny-llama")
    assert json.loads((again / "config.json").read_text()) == {"model_type": "llama"}


def test_push_folder_rejects_a_missing_folder(tmp_path):
    with pytest.raises(UsageError, match="not a directory"):
        push_folder(tmp_path / "nope", "org/x")


# -- the error table: one tinykit error per Hub failure -------------------------------------


def test_missing_repo_is_a_hub_error_naming_it(tiny_hub):
    with pytest.raises(HubError, match=r"'org/missing' was not found on http://127\.0\.0\.1") as e:
        download_source("org/missing")
    assert (e.value.repo_id, e.value.exit_code, "\n" in str(e.value)) == ("org/missing", 3, False)
    assert type(e.value.__cause__).__name__ == "RepositoryNotFoundError"


def test_gated_repo_says_how_to_log_in(tiny_hub, llama_with_weights):
    tiny_hub.add_model(LLAMA, llama_with_weights)
    tiny_hub.gate(LLAMA)
    with pytest.raises(HubError, match="is gated") as e:
        download_source(LLAMA)
    assert "hf auth login" in str(e.value) and "HF_TOKEN" in str(e.value)


def test_bad_revision_is_a_hub_error_with_the_revision(tiny_hub, llama_with_weights):
    tiny_hub.add_model(LLAMA, llama_with_weights)
    with pytest.raises(HubError, match="Revision 'v9' does not exist") as e:
        download_source(LLAMA, revision="v9")
    assert e.value.revision == "v9"


def test_server_failure_is_a_hub_error(tiny_hub, llama_with_weights):
    tiny_hub.add_model(LLAMA, llama_with_weights)
    tiny_hub.fail("/api/*", status=500)
    with pytest.raises(HubError, match="500"):
        download_source(LLAMA)


def test_invalid_repo_id_is_a_usage_error(tiny_hub):
    with pytest.raises(UsageError, match="not a valid Hub repo id"):
        download_source("org/bad name!")


def test_unreachable_hub_is_a_hub_error(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with (
        use_endpoint(f"http://127.0.0.1:{port}", cache_dir=tmp_path / "cache"),
        pytest.raises(HubError, match=f"Could not reach the Hub at http://127.0.0.1:{port}") as e,
    ):
        download_source(LLAMA)
    assert not isinstance(e.value, OfflineCacheMiss)


_OFFLINE = """
import sys
from tinykit.errors import TinykitError
from tinykit.hub.client import download_source
try:
    folder, sha = download_source(sys.argv[1])
    print("OK", sha, sorted(p.name for p in folder.iterdir()))
except TinykitError as e:
    print(f"{type(e).__name__}: {e}")
    sys.exit(e.exit_code)
"""


def test_offline_mode_uses_the_cache_and_misses_clearly(tiny_hub, llama_with_weights):
    """HF_HUB_OFFLINE is read at import: the offline runs are fresh interpreters."""
    tiny_hub.add_model(LLAMA, llama_with_weights)
    _, sha = download_source(LLAMA)  # fills the per-test cache, which subprocesses inherit
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    tiny_hub.log.clear()
    hit = subprocess.run(
        [sys.executable, "-c", _OFFLINE, LLAMA], env=env, capture_output=True, text=True
    )
    assert hit.returncode == 0, hit.stderr
    assert hit.stdout.startswith(f"OK {sha} [")
    miss = subprocess.run(
        [sys.executable, "-c", _OFFLINE, "org/never-seen"], env=env, capture_output=True, text=True
    )
    assert miss.returncode == 3
    assert miss.stdout.startswith(
        "OfflineCacheMiss: Hub repo 'org/never-seen' is not in the local cache"
    )
    assert "HF_HUB_OFFLINE" in miss.stdout and len(miss.stdout.strip().splitlines()) == 1
    assert len(tiny_hub.log) == 0  # offline means offline


def test_download_source_mirrors_every_hub_files_repo_byte_for_byte(tiny_hub):
    """What make-tiny reads from the Hub is exactly the local folder, and never a weight."""
    repos = sorted({p.parent.relative_to(HUB_FILES).as_posix() for p in HUB_FILES.glob("*/*/*")})
    assert len(repos) == 26
    for repo_id in repos:
        tiny_hub.add_model(repo_id, HUB_FILES / repo_id)
    for repo_id in repos:
        folder, _ = download_source(repo_id)
        local = {p.name: p.read_bytes() for p in (HUB_FILES / repo_id).iterdir()}
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == local, repo_id
    assert tiny_hub.log.weight_files_requested() == []


def test_download_source_fetches_remote_code_only_when_asked(tiny_hub, tmp_path):
    folder = tmp_path / "remote"
    shutil.copytree(HUB_FILES / "THUDM/chatglm3-6b", folder)
    (folder / "modeling_chatglm.py").write_text("# the repo's own model code\n")
    tiny_hub.add_model("THUDM/chatglm3-6b", folder)
    plain, _ = download_source("THUDM/chatglm3-6b")
    assert not (plain / "modeling_chatglm.py").exists()
    with_code, _ = download_source("THUDM/chatglm3-6b", include_code=True)
    assert (with_code / "modeling_chatglm.py").is_file()


def test_a_later_loopback_hub_also_gets_shared_clients_made_under_an_earlier_one(tmp_path):
    # transformers makes its shared HfApi on first use, with the endpoint of that moment: an
    # earlier test's loopback Hub. A later Hub must get it too, or tree listings (the chat
    # templates AutoTokenizer looks for) go to the earlier server and come back RepoNotFound.
    from transformers.utils import hub as transformers_hub

    from tinykit.hub.server import HubServer

    repo = tmp_path / "later" / "org" / "tiny"
    repo.mkdir(parents=True)
    (repo / "config.json").write_text('{"model_type": "gpt2"}')
    (tmp_path / "earlier").mkdir()
    with HubServer(tmp_path / "earlier") as earlier, use_endpoint(earlier.endpoint):
        transformers_hub._hf_api = None
        assert transformers_hub.hf_api().endpoint == earlier.endpoint
    with HubServer(tmp_path / "later") as later, use_endpoint(later.endpoint):
        assert transformers_hub.hf_api().endpoint == later.endpoint
        assert (
            transformers_hub.list_repo_templates("ORG/tiny", local_files_only=False) == []
        )  # EntryNotFound: no templates
        assert "/tree/main/additional_chat_templates?" in later.log.records[-1].path
    assert transformers_hub.hf_api().endpoint == earlier.endpoint  # restored as found
