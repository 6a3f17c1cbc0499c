"""The loopback Hub speaks the Hub protocol: real huggingface_hub calls, real HTTP on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import HUB_FILES
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub import errors as hf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinykit.hub.server import HubServer, serve
from tinykit.hub.server.handler import ROUTES
from tinykit.hub.server.routes import find_route

_PROPERTY_SETTINGS = dict(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _raw(hub: HubServer, method: str, path: str, headers: dict | None = None):
    """One request, no redirect following: (status, headers, body)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    request = urllib.request.Request(hub.endpoint + path, method=method, headers=headers or {})
    try:
        with opener.open(request) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


@pytest.fixture
def weights_repo(tmp_path: Path) -> Path:
    """Real BERT config/tokenizer files next to a (fake-content) weight file."""
    folder = tmp_path / "bert"
    shutil.copytree(HUB_FILES / "google-bert/bert-base-uncased", folder)
    (folder / "model.safetensors").write_bytes(b"\x00" * 4096)
    (folder / "sub").mkdir()
    (folder / "sub" / "extra.json").write_text("{}")
    return folder


def test_plain_file_head_carries_commit_etag_and_size(tiny_hub, weights_repo):
    tiny_hub.add_model("org/bert", weights_repo)
    status, headers, body = _raw(tiny_hub, "HEAD", "/org/bert/resolve/main/config.json")
    data = (weights_repo / "config.json").read_bytes()
    assert status == 200 and body == b""
    blob_id = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert headers["ETag"] == f'"{blob_id}"'
    assert headers["X-Repo-Commit"] == HfApi().model_info("org/bert").sha
    assert int(headers["Content-Length"]) == len(data)


def test_lfs_file_redirects_to_a_second_origin_with_linked_headers(tiny_hub, weights_repo):
    tiny_hub.add_model("org/bert", weights_repo)
    status, headers, _ = _raw(tiny_hub, "HEAD", "/org/bert/resolve/main/model.safetensors")
    assert status == 302
    assert headers["Location"].startswith(tiny_hub.cdn_endpoint + "/")
    assert tiny_hub.cdn_endpoint != tiny_hub.endpoint
    sha256 = hashlib.sha256(b"\x00" * 4096).hexdigest()
    assert headers["X-Linked-Etag"] == f'"{sha256}"'
    assert headers["X-Linked-Size"] == "4096"
    path = hf_hub_download("org/bert", "model.safetensors")
    assert Path(path).read_bytes() == b"\x00" * 4096
    assert [r.kind for r in tiny_hub.log if r.filename == "model.safetensors"][-1] == "cdn"


def test_snapshot_download_sends_the_measured_sequence_and_only_allowed_files(
    tiny_hub, weights_repo
):
    tiny_hub.add_model("org/bert", weights_repo)
    folder = Path(snapshot_download("org/bert", allow_patterns=["*.json", "*.txt"]))
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == [
        "config.json",
        "extra.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    first, second = [str(r) for r in tiny_hub.log][:2]
    assert first == "GET 200 /api/models/org/bert/revision/main"
    assert second.startswith(f"GET 200 /api/models/org/bert/tree/{folder.name}?recursive=true")
    assert tiny_hub.log.weight_files_requested() == []
    assert set(tiny_hub.log.files_downloaded()) == {
        "config.json",
        "sub/extra.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    }


def test_errors_carry_the_codes_huggingface_hub_maps(tiny_hub, weights_repo):
    tiny_hub.add_model("org/bert", weights_repo)
    with pytest.raises(hf.RepositoryNotFoundError):
        hf_hub_download("org/missing", "config.json")
    with pytest.raises(hf.RevisionNotFoundError):
        hf_hub_download("org/bert", "config.json", revision="nope")
    with pytest.raises(hf.RemoteEntryNotFoundError):
        hf_hub_download("org/bert", "missing.json")
    tiny_hub.gate("org/bert")
    with pytest.raises(hf.GatedRepoError):
        hf_hub_download("org/bert", "vocab.txt")
    assert [r.status for r in tiny_hub.log] == [404, 404, 404, 401]


def test_gated_repo_serves_requests_that_carry_its_token(tiny_hub, weights_repo):
    tiny_hub.add_model("org/bert", weights_repo)
    tiny_hub.gate("org/bert", token="hf_secret")
    with pytest.raises(hf.GatedRepoError):
        hf_hub_download("org/bert", "config.json", token="hf_wrong")
    assert Path(hf_hub_download("org/bert", "config.json", token="hf_secret")).is_file()


def test_hidden_repo_and_file_are_missing(tiny_hub, weights_repo):
    tiny_hub.add_model("org/bert", weights_repo)
    tiny_hub.hide("org/bert", "vocab.txt")
    assert "vocab.txt" not in {s.rfilename for s in HfApi().model_info("org/bert").siblings}
    tiny_hub.hide("org/bert")
    with pytest.raises(hf.RepositoryNotFoundError):
        HfApi().model_info("org/bert")


def test_repo_ids_match_case_insensitively_and_report_the_canonical_id(tiny_hub):
    with serve(HUB_FILES) as hub:
        status, _, body = _raw(hub, "GET", "/api/models/qwen/QWEN3-8b")
    assert status == 200 and json.loads(body)["id"] == "Qwen/Qwen3-8B"


def test_commit_sha_changes_exactly_when_content_changes(tiny_hub, weights_repo):
    tiny_hub.add_model("org/bert", weights_repo)
    api = HfApi()
    first = api.model_info("org/bert").sha
    assert api.model_info("org/bert").sha == first
    (weights_repo / "config.json").write_text('{"model_type": "bert"}')
    second = api.model_info("org/bert").sha
    assert second != first and len(second) == 40
    assert api.model_info("org/bert", revision=second).sha == second


@settings(**_PROPERTY_SETTINGS)
@given(first=st.binary(min_size=8, max_size=8), second=st.binary(min_size=8, max_size=8))
def test_rewrites_in_quick_succession_still_change_the_sha(tiny_hub, tmp_path, first, second):
    """Same size, same mtime tick: the sha must still follow the bytes."""
    (tmp_path / "w.bin").write_bytes(first)
    tiny_hub.add_model("org/rewrite", tmp_path)
    before = tiny_hub.store.snapshot("model", "org/rewrite").sha
    (tmp_path / "w.bin").write_bytes(second)
    after = tiny_hub.store.snapshot("model", "org/rewrite").sha
    assert (before == after) == (first == second)


def test_a_second_revision_is_served_from_its_own_folder(tiny_hub, weights_repo, tmp_path):
    other = tmp_path / "dev"
    other.mkdir()
    (other / "config.json").write_text('{"dev": true}')
    tiny_hub.add_model("org/bert", weights_repo)
    tiny_hub.add_model("org/bert", other, revision="refs/pr/1")
    path = hf_hub_download("org/bert", "config.json", revision="refs/pr/1")
    assert json.loads(Path(path).read_text()) == {"dev": True}


def test_tree_and_paths_info_list_files_and_directories(tiny_hub, weights_repo):
    tiny_hub.add_model("org/bert", weights_repo)
    api = HfApi()
    top = {e.path for e in api.list_repo_tree("org/bert")}
    assert "sub" in top and "sub/extra.json" not in top
    assert "sub/extra.json" in {e.path for e in api.list_repo_tree("org/bert", recursive=True)}
    infos = api.get_paths_info("org/bert", ["config.json", "sub", "nope.txt"])
    assert [(type(i).__name__, i.path) for i in infos] == [
        ("RepoFile", "config.json"),
        ("RepoFolder", "sub"),
    ]
    with pytest.raises(hf.RemoteEntryNotFoundError):
        list(api.list_repo_tree("org/bert", path_in_repo="nope"))


@settings(**_PROPERTY_SETTINGS)
@given(data=st.binary(min_size=1, max_size=300), a=st.integers(0, 299), n=st.integers(0, 299))
def test_range_requests_return_exactly_the_asked_bytes(tiny_hub, tmp_path, data, a, n):
    a = a % len(data)
    b = min(a + n, len(data) - 1)
    (tmp_path / "blob.txt").write_bytes(data)
    tiny_hub.add_model("org/ranges", tmp_path)
    status, headers, body = _raw(
        tiny_hub, "GET", "/org/ranges/resolve/main/blob.txt", {"Range": f"bytes={a}-{b}"}
    )
    assert status == 206
    assert body == data[a : b + 1]
    assert headers["Content-Range"] == f"bytes {a}-{b}/{len(data)}"


def test_push_round_trip_writes_a_copy_never_the_mounted_source(tiny_hub, weights_repo, tmp_path):
    api = HfApi()
    url = api.create_repo("org/pushed")
    assert str(url).endswith("/org/pushed")
    assert str(api.create_repo("org/pushed", exist_ok=True)).endswith("/org/pushed")  # 409 + url
    upload = tmp_path / "upload"
    upload.mkdir()
    (upload / "config.json").write_text('{"a": 1}')
    (upload / "model.safetensors").write_bytes(b"weights" * 100)  # LFS mode: batch + PUT + verify
    api.upload_folder(folder_path=upload, repo_id="org/pushed")
    again = Path(snapshot_download("org/pushed"))
    assert (again / "model.safetensors").read_bytes() == b"weights" * 100
    assert any(r.kind == "lfs" and r.method == "PUT" for r in tiny_hub.log)

    tiny_hub.add_model("org/bert", weights_repo)
    before = sorted(p.name for p in weights_repo.iterdir())
    api.upload_file(path_or_fileobj=b"new", path_in_repo="new.txt", repo_id="org/bert")
    api.delete_file("vocab.txt", repo_id="org/bert")
    assert sorted(p.name for p in weights_repo.iterdir()) == before
    assert {s.rfilename for s in api.model_info("org/bert").siblings} >= {"new.txt", "config.json"}
    assert "vocab.txt" not in {s.rfilename for s in api.model_info("org/bert").siblings}


def test_reads_during_commits_always_get_a_file_that_matches_its_etag(tiny_hub, tmp_path):
    """A commit renames the repo folder away and back: a read must never fall in between (a
    404) or send one commit's bytes under another's ETag."""
    api = HfApi()
    api.create_repo("org/busy")
    api.upload_file(path_or_fileobj=b"v0", path_in_repo="config.json", repo_id="org/busy")
    done = threading.Event()

    def commit_forever():
        n = 0
        while not done.is_set():
            n += 1
            data = b"v%d" % n * (1 + n % 7)  # sizes vary too
            api.upload_file(path_or_fileobj=data, path_in_repo="config.json", repo_id="org/busy")

    writer = threading.Thread(target=commit_forever)
    writer.start()
    try:
        answers = [_raw(tiny_hub, "GET", "/org/busy/resolve/main/config.json") for _ in range(300)]
    finally:
        done.set()
        writer.join()
    assert [status for status, _, _ in answers if status != 200] == []
    for _, headers, body in answers:
        blob_id = hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()
        assert headers["ETag"] == f'"{blob_id}"'
    assert len({body for _, _, body in answers}) > 1  # the commits did land in between


def test_a_snapshot_taken_before_a_commit_is_taken_again(tiny_hub):
    api = HfApi()
    api.create_repo("org/moved")
    api.upload_file(path_or_fileobj=b"old", path_in_repo="a.txt", repo_id="org/moved")
    store = tiny_hub.store
    stale = store.snapshot("model", "org/moved")
    api.upload_file(path_or_fileobj=b"newer", path_in_repo="a.txt", repo_id="org/moved")
    with store.current(stale) as fresh:
        assert fresh.sha != stale.sha and fresh.files["a.txt"].size == 5
        assert Path(fresh.files["a.txt"].local).read_bytes() == b"newer"
    with store.current(fresh) as same:
        assert same is fresh


def test_failed_and_slow_responses_are_injected_and_counted(tiny_hub, weights_repo):
    tiny_hub.add_model("org/bert", weights_repo)
    fault = tiny_hub.fail("/api/models/*", status=503, times=1)
    with pytest.raises(hf.HfHubHTTPError) as e:
        HfApi().model_info("org/bert")
    assert e.value.response.status_code == 503 and fault.hits == 1
    assert HfApi().model_info("org/bert").id == "org/bert"  # times=1: the next one passes
    slow = tiny_hub.slow(0.2, "/org/bert/resolve/*")
    hf_hub_download("org/bert", "config.json")
    assert slow.hits == 2  # HEAD + GET


def test_server_listens_on_loopback_only(tiny_hub):
    assert tiny_hub.endpoint.startswith("http://127.0.0.1:")
    assert tiny_hub.cdn_endpoint.startswith("http://127.0.0.1:")


def test_every_route_is_one_that_real_clients_send(tiny_hub, weights_repo, tmp_path):
    """Each row of ROUTES answers a real huggingface_hub call, and every request those calls
    send has a row. (The Xet token rows excepted: no client asks a server that never offers
    Xet; they answer 501 with how to turn Xet off.)"""
    api = HfApi()
    tiny_hub.add_model("org/bert", weights_repo)
    hf_hub_download("org/bert", "model.safetensors")  # resolve, then the CDN
    snapshot_download("org/bert", allow_patterns=["*.json"])  # revision, tree
    api.model_info("org/bert")
    api.get_paths_info("org/bert", ["config.json"])
    api.list_repo_refs("org/bert")
    assert api.whoami()["name"] == "tinykit"
    api.create_repo("org/pushed")
    upload = tmp_path / "upload"
    upload.mkdir()
    (upload / "README.md").write_text("---\nlicense: mit\n---\n")  # validate-yaml
    # LFS: batch, upload, verify (bytes no other test uploaded: the server keeps LFS objects)
    (upload / "model.safetensors").write_bytes(str(tmp_path).encode() * 100)
    api.upload_folder(folder_path=upload, repo_id="org/pushed")  # preupload, commit
    assert [r for r in tiny_hub.log if r.status >= 400] == []
    for token in ("read", "write"):
        status, _, body = _raw(tiny_hub, "GET", f"/api/models/org/bert/xet-{token}-token/main")
        assert status == 501 and b"HF_HUB_DISABLE_XET" in body
    answered = [find_route(ROUTES, r.method, urlsplit(r.path).path) for r in tiny_hub.log]
    assert None not in answered
    assert {route.template for route, _ in answered} == {route.template for route in ROUTES}


@pytest.mark.parametrize(
    "method,path",
    [
        ("DELETE", "/api/models/org/bert"),
        ("POST", "/org/bert/resolve/main/config.json"),
        ("GET", "/api/repos/create"),
        ("GET", "/api/models/org/bert/commit/main"),
        ("GET", "/api/x/resolve/main/config.json"),  # /api/ is never a repo path
        ("GET", "/api/models/org/bert/unknown"),
    ],
)
def test_a_method_or_path_no_route_lists_is_a_404(tiny_hub, weights_repo, method, path):
    tiny_hub.add_model("org/bert", weights_repo)
    tiny_hub.add_model("api/x", weights_repo)
    before = sorted(p.name for p in weights_repo.iterdir())
    status, headers, body = _raw(tiny_hub, method, path)
    assert status == 404 and json.loads(body)["error"].startswith("no such endpoint"), body
    assert sorted(p.name for p in weights_repo.iterdir()) == before
    assert [r.kind for r in tiny_hub.log] == ["other"]
