"""`tinykit make-tiny-tokenizer` and make_tiny_tokenizer: output, atomic writes, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizer_sources import REPO, hub

import tinykit
from tinykit.errors import ShrinkConstraintError, UsageError


def _cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "tinykit", "make-tiny-tokenizer", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def test_cli_writes_a_tiny_tokenizer_and_reports_json(tmp_path):
    out = tmp_path / "tiny"
    proc = _cli(hub("openai-community/gpt2-xl"), "--vocab", 512, "-o", out, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["vocab_size"] == 512 and info["kind"] == "byte-level-bpe"
    assert info["id_map"] == {"50256": 511} and info["out"] == str(out)
    assert (out / "tokenizer.json").is_file() and info["size_bytes"] < 100 * 1024
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]  # no staging folder left behind


def test_cli_default_out_refuses_to_overwrite_without_force(tmp_path):
    src = hub("google-bert/bert-base-uncased")
    assert _cli(src, "--vocab", 300, cwd=tmp_path).returncode == 0
    out = tmp_path / "tiny-bert-base-uncased-tokenizer"
    before = (out / "tokenizer.json").read_bytes()
    proc = _cli(src, "--vocab", 400, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert (
        proc.stderr.strip().splitlines()[-1].startswith("tinykit: error: UsageError: output folder")
    )
    assert (out / "tokenizer.json").read_bytes() == before
    proc = _cli(src, "--vocab", 400, "--force", cwd=tmp_path)
    assert proc.returncode == 0 and "400 ids" in proc.stdout


def test_cli_bad_source_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()  # no tokenizer files and no config.json: nothing to train for
    proc = _cli(tmp_path / "empty", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("tinykit: error:") == 1 and "Traceback" not in proc.stderr
    assert "no tokenizer files and no config.json" in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["empty"]


def test_cli_config_only_folder_trains_a_tokenizer_for_its_type(tmp_path):
    proc = _cli(hub("Qwen/Qwen3-8B"), cwd=tmp_path)  # config.json only: Qwen's class and tokens
    assert proc.returncode == 0, proc.stderr
    record = json.loads(next(tmp_path.glob("*/tinykit-tokenizer.json")).read_text())
    assert record["method"] == "scratch" and {"151643", "151645"} <= set(record["id_map"])


def test_api_failure_leaves_nothing_half_written(tmp_path):
    out = tmp_path / "tiny"
    with pytest.raises(ShrinkConstraintError):
        tinykit.make_tiny_tokenizer(hub("openai-community/gpt2-xl"), vocab=100, out=out)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError, match="is not a transformers model_type, a folder or a Hub id"):
        tinykit.make_tiny_tokenizer("no such source", out=out)
    result = tinykit.make_tiny_tokenizer(hub("facebook/bart-large-cnn"), vocab=600, out=out)
    assert result.path == out and os.fspath(result) == str(out)
    record = json.loads((out / "tinykit-tokenizer.json").read_text())
    assert record["vocab_size"] == 600 and record["id_map"]["50264"] == 599  # <mask>
    assert result.record() == record  # the result is what was written, nothing re-read


def test_out_is_the_second_argument_and_bad_types_are_usage_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = tinykit.make_tiny_tokenizer(hub("google-bert/bert-base-uncased"), "tiny-tok")
    assert result.path == Path("tiny-tok") and result.vocab_size <= 1024
    assert (tmp_path / "tiny-tok" / "tokenizer.json").is_file()
    with pytest.raises(UsageError, match=r"out=512 is not a folder path.*vocab=512"):
        tinykit.make_tiny_tokenizer(hub("google-bert/bert-base-uncased"), 512)
    with pytest.raises(UsageError, match=r"vocab='512' is not an integer"):
        tinykit.make_tiny_tokenizer(hub("google-bert/bert-base-uncased"), vocab="512")
    with pytest.raises(UsageError, match="already exists and is not empty"):
        tinykit.make_tiny_tokenizer(hub("google-bert/bert-base-uncased"), "tiny-tok")
    (tmp_path / "empty").mkdir()  # an existing empty folder is a fine target
    assert tinykit.make_tiny_tokenizer(hub("google-bert/bert-base-uncased"), "empty").vocab_size


def test_hub_ids_and_model_types_are_sources_too(tiny_hub, tmp_path):
    tiny_hub.add_model("openai-community/gpt2-xl", hub("openai-community/gpt2-xl"))
    path = tinykit.make_tiny_tokenizer("openai-community/gpt2-xl", vocab=400, out=tmp_path / "hub")
    record = json.loads((path / "tinykit-tokenizer.json").read_text())
    assert record["vocab_size"] == 400 and record["id_map"]["50256"] == 399  # <|endoftext|>
    assert len(record["revision"]) == 40  # the served commit sha
    assert "openai-community/gpt2-xl/resolve/" in " ".join(str(r) for r in tiny_hub.log)
    assert tiny_hub.log.weight_files_requested() == []
    trained = tinykit.make_tiny_tokenizer("llama", vocab=512, out=tmp_path / "llama")
    assert json.loads((trained / "tinykit-tokenizer.json").read_text())["method"] == "scratch"
