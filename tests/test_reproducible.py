"""Same source + spec + seed + versions gives byte-identical files; the manifest records every input."""

from __future__ import annotations

import hashlib
import json

import pytest
from conftest import HUB_FILES

import tinykit
from tinykit.model.build import make_tiny


@pytest.mark.parametrize("source", ["qwen3_moe", str(HUB_FILES / "google/gemma-3-4b-it")])
def test_two_builds_give_identical_sha256_for_every_file(source, tmp_path):
    a = make_tiny(source, tmp_path / "a", seed=3).files
    b = make_tiny(source, tmp_path / "b", seed=3).files
    assert a == b
    assert {"config.json", "model.safetensors", "README.md", "tinykit.json"} <= set(a)


def test_another_seed_gives_other_weights(tmp_path):
    a = make_tiny("qwen3", tmp_path / "a", seed=1).files["model.safetensors"]
    b = make_tiny("qwen3", tmp_path / "b", seed=2).files["model.safetensors"]
    assert a["sha256"] != b["sha256"] and a["bytes"] == b["bytes"]


def test_manifest_and_card_record_every_input(tmp_path):
    out = tinykit.make_tiny(
        HUB_FILES / "Qwen/Qwen3-8B", tmp_path / "tiny", hidden=64, seed=7, dtype="bfloat16"
    )
    manifest = json.loads((out / "tinykit.json").read_text())
    assert manifest["spec"]["hidden"] == 64 and manifest["seed"] == 7
    assert manifest["source"]["revision"].startswith("sha256:")
    assert set(manifest["versions"]) >= {"tinykit", "transformers", "torch", "tokenizers"}
    assert manifest["command"].endswith("--hidden 64 --dtype bfloat16 --seed 7")
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\n")
    assert manifest["command"] in card


def test_an_existing_output_is_kept_without_force_and_force_replaces_only_a_build(tmp_path):
    out = tmp_path / "tiny"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(tinykit.errors.UsageError, match="--force"):
        tinykit.make_tiny("llama", out)
    with pytest.raises(tinykit.errors.UsageError, match="--force will not replace"):
        tinykit.make_tiny("llama", out, force=True)  # not a folder tinykit built
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    tinykit.make_tiny("llama", out)
    (out / "stale.txt").write_text("from the last build")
    tinykit.make_tiny("llama", out, force=True)
    assert not (out / "stale.txt").exists() and (out / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]  # no temp folder left behind


@pytest.mark.parametrize(
    "source", ["t5", "bert", "llama", str(HUB_FILES / "openai/clip-vit-large-patch14")]
)
def test_builds_in_two_processes_are_byte_identical(source, tmp_path):
    """Tokenizers trained from scratch too: their trainers' hash-order tie-breaks are canonicalised."""
    import subprocess
    import sys

    def files(out):
        done = subprocess.run(
            [sys.executable, "-m", "tinykit", "make-tiny", source, "-o", str(out), "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        return {name: f["sha256"] for name, f in json.loads(done.stdout)["files"].items()}

    first, second = files(tmp_path / "a"), files(tmp_path / "b")
    assert first == second and "tokenizer.json" in first
