"""tinykit.hub.layout: a file written where repo_folder says is what the loopback Hub serves to a
real client (models, datasets, spaces, other branches), and a push lands there too; make-tiny's
faithful tokenizer copy leaves out every weight suffix of the one list."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import HUB_FILES
from huggingface_hub import HfApi, hf_hub_download

import tinykit
from tinykit.hub.layout import WEIGHT_SUFFIXES, is_weight_file, repo_folder
from tinykit.hub.server.store import RepoStore

CASES = [
    ("model", "org/m", None),
    ("dataset", "org/d", None),
    ("space", "org/s", None),
    ("model", "org/m", "refs/pr/1"),
    ("dataset", "Org/D", "v2"),
]


@pytest.mark.parametrize(("repo_type", "repo_id", "revision"), CASES)
def test_a_file_at_repo_folder_is_what_the_hub_serves(tiny_hub, repo_type, repo_id, revision):
    root = tiny_hub.store.root
    text = f"{repo_type} {repo_id} {revision}"
    for rev in {None, revision}:  # a branch is served beside its repo's main folder only
        folder = repo_folder(root, repo_type, repo_id, rev)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "a.txt").write_text(f"{text} @ {rev}")
    got = hf_hub_download(repo_id, "a.txt", repo_type=repo_type, revision=revision)
    assert Path(got).read_text() == f"{text} @ {revision}"
    snap = RepoStore(root).snapshot(repo_type, repo_id, revision or "main")
    assert snap.files["a.txt"].local == repo_folder(root, repo_type, repo_id, revision) / "a.txt"


def test_main_is_the_repo_folder_itself(tmp_path):
    assert repo_folder(tmp_path, "model", "o/n", "main") == repo_folder(tmp_path, "model", "o/n")
    assert repo_folder(tmp_path, "model", "o/n") == tmp_path / "o" / "n"
    assert repo_folder(tmp_path, "dataset", "o/n") == tmp_path / "datasets" / "o" / "n"


def test_a_push_lands_at_repo_folder(tiny_hub, tmp_path):
    api = HfApi()
    api.create_repo("org/pushed", repo_type="dataset")
    (tmp_path / "rows.csv").write_text("a\n1\n")
    api.upload_file(
        path_or_fileobj=tmp_path / "rows.csv",
        path_in_repo="rows.csv",
        repo_id="org/pushed",
        repo_type="dataset",
    )
    folder = repo_folder(tiny_hub.store.root, "dataset", "org/pushed")
    assert (folder / "rows.csv").read_text() == "a\n1\n"


def test_faithful_tokenizer_copy_leaves_out_every_weight_file(tmp_path):
    source = tmp_path / "bert"
    shutil.copytree(HUB_FILES / "google-bert" / "bert-base-uncased", source)
    weights = [f"weights{suffix}" for suffix in sorted(WEIGHT_SUFFIXES)]
    for name in [*weights, "model.safetensors.index.json", "modeling_x.py"]:
        (source / name).write_bytes(b"x")
    out = tmp_path / "tiny"
    tinykit.make_tiny(source, out, mode="faithful", layers=1)
    shipped = {p.name for p in out.iterdir()}
    assert "vocab.txt" in shipped and "tokenizer.json" in shipped
    assert not shipped & {*weights, "model.safetensors.index.json", "modeling_x.py"}
    assert all(is_weight_file(w) and is_weight_file(w.upper()) for w in weights)
