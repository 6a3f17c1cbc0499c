"""tiny_model / tiny_dataset: built once per key, cached on disk, loaded once per session."""

from __future__ import annotations

import json

from tests.conftest import HUB_FILES
from tinykit.artifacts.cache import Cache

DATASET_TESTS = """
import pytest

@pytest.mark.parametrize("i", range(3))
def test_named(tiny_dataset, i):
    ds, path = tiny_dataset("tiny-classification")
    assert ds["train"].num_rows == 16
    assert ds["train"].features["label"].names == ["negative", "positive"]

def test_inline_schema(tiny_dataset):
    ds, _ = tiny_dataset({"x": {"_type": "Value", "dtype": "int32"}}, rows=3, seed=1)
    assert ds["train"].num_rows == 3 and ds["train"].features["x"].dtype == "int32"

def test_wrong_kind(tiny_model):
    with pytest.raises(Exception, match="'tiny-chat' .* is a synthetic_dataset, not a model"):
        tiny_model("tiny-chat")
"""


def test_datasets_build_once_and_are_reused_across_sessions(pytester, tmp_path):
    pytester.makepyfile(DATASET_TESTS)
    cache_dir = tmp_path / "cache"
    first = pytester.runpytest_subprocess(f"--tinykit-cache-dir={cache_dir}")
    first.assert_outcomes(passed=5)
    assert len(Cache(cache_dir).builds()) == 2  # three tests, one build of tiny-classification
    second = pytester.runpytest_subprocess(f"--tinykit-cache-dir={cache_dir}", "-n", "2")
    second.assert_outcomes(passed=5)
    assert len(Cache(cache_dir).builds()) == 2  # warm disk cache: no build in either worker


def test_xdist_workers_build_a_key_once(pytester, tmp_path):
    pytester.makepyfile(DATASET_TESTS)
    cache_dir = tmp_path / "cache"
    result = pytester.runpytest_subprocess(f"--tinykit-cache-dir={cache_dir}", "-n", "2")
    result.assert_outcomes(passed=5)
    builds = Cache(cache_dir).builds()
    assert len(builds) == 2 and len({b["key"] for b in builds}) == 2
    assert {b["worker"] for b in builds} <= {"gw0", "gw1"}
    meta_file = cache_dir / "artifacts" / builds[0]["key"] / "tinykit-cache.json"
    meta = json.loads(meta_file.read_text())
    assert meta["kind"] == "synthetic_dataset"


MODEL_TESTS = """
import torch

def test_logits(tiny_model, tensor_snapshot, tinykit_loaded):
    model, path = tiny_model("llama", layers=2, hidden=32, seed=3)
    assert (path / "model.safetensors").is_file() and type(model).__name__ == "LlamaForCausalLM"
    with torch.no_grad():
        logits = model(torch.arange(6)[None]).logits
    tensor_snapshot("logits", logits)

def test_same_spec_is_loaded_once_per_session(tiny_model, tinykit_loaded):
    first, path = tiny_model("llama", layers=2, hidden=32, seed=3)
    second, _ = tiny_model("llama", layers=2, hidden=32, seed=3)
    assert list(tinykit_loaded) == [("model", str(path))]  # one load, two private copies
    assert first is not second and torch.equal(first.lm_head.weight, second.lm_head.weight)

def test_tokenizers_from_a_model_fixture_and_from_a_folder(tiny_tokenizer, tiny_model):
    model, _ = tiny_model("tiny-llama")
    shipped, _ = tiny_tokenizer("tiny-llama")
    assert len(shipped) == model.config.vocab_size
    shrunk, path = tiny_tokenizer(GPT2, vocab=400)
    assert len(shrunk) <= 400 and shrunk.decode(shrunk("hello world")["input_ids"]) == "hello world"
"""


def test_tiny_model_logits_match_their_snapshot_across_sessions(pytester, tmp_path):
    gpt2 = HUB_FILES / "openai-community" / "gpt2-xl"
    pytester.makepyfile(test_model=f"GPT2 = {str(gpt2)!r}\n" + MODEL_TESTS)
    cache_dir = tmp_path / "cache"
    first = pytester.runpytest_subprocess(
        f"--tinykit-cache-dir={cache_dir}", "--tinykit-update-snapshots"
    )
    first.assert_outcomes(passed=3)
    # a cold cache in a new session: the rebuilt model gives the same logits (seeded weights)
    cold = pytester.runpytest_subprocess(f"--tinykit-cache-dir={tmp_path / 'cold'}")
    cold.assert_outcomes(passed=3)
    kinds = sorted(b["kind"] for b in Cache(cache_dir).builds())
    assert kinds == sorted(b["kind"] for b in Cache(tmp_path / "cold").builds())
    assert kinds == ["model", "model", "tokenizer"]  # llama spec, tiny-llama, the gpt2 tokenizer


REPO_FIXTURE_TESTS = """
from pathlib import Path

import tinykit

def test_repo_fixture(tiny_dataset, tinykit_cache):
    ds, path = tiny_dataset("tiny-mine")
    assert ds["train"].num_rows == 5 and list(ds["train"].features) == ["score"]
    # the same artifact outside pytest, by name, from the public API
    same = tinykit.fixture_path("tiny-mine", fixtures="fixtures", cache_dir=tinykit_cache.root)
    assert same == path

def test_a_repo_name_shadows_a_shipped_one(tiny_dataset):
    ds, _ = tiny_dataset("tiny-text")
    assert ds["train"].num_rows == 2
"""
REPO_FIXTURES = """
[tiny-mine]
kind = "synthetic_dataset"
source = { score = { dtype = "float32", _type = "Value" } }
spec = { rows = 5, seed = 0 }

[tiny-text]
kind = "synthetic_dataset"
source = { text = { dtype = "string", _type = "Value" } }
spec = { rows = 2, seed = 0 }
"""


def test_a_repo_registers_its_own_named_fixtures(pytester, tmp_path):
    pytester.makepyfile(REPO_FIXTURE_TESTS)
    (pytester.path / "fixtures").mkdir()
    (pytester.path / "fixtures" / "mine.toml").write_text(REPO_FIXTURES)
    pytester.makeini("[pytest]\ntinykit_fixtures = fixtures\n")
    result = pytester.runpytest_subprocess(f"--tinykit-cache-dir={tmp_path / 'cache'}")
    result.assert_outcomes(passed=2)
    pytester.makeini("[pytest]\ntinykit_fixtures = no-such-folder\n")
    missing = pytester.runpytest_subprocess(
        f"--tinykit-cache-dir={tmp_path / 'cache'}", "-k", "shadows"
    )
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(["*Fixture folder *no-such-folder does not exist*"])
