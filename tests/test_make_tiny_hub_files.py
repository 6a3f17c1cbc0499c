"""Acceptance on real configs: every native dev-set repo builds, verifies, is tiny and keeps its block types."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _hub_files import NATIVE, REMOTE_ONLY, is_multimodal, load_warnings, repo_id
from conftest import HUB_FILES

import tinykit
from tinykit.errors import UnsupportedModelError
from tinykit.model.build import make_tiny
from tinykit.model.config import shrink_config
from tinykit.model.spec import ShrinkSpec
from tinykit.model.verify import block_types


def source_block_types(folder) -> dict[str, list[str]]:
    """The source's layer kinds: its full depth at tiny width, built on the meta device."""
    import torch
    import transformers

    raw = json.loads((folder / "config.json").read_text())
    config = shrink_config(raw, ShrinkSpec(), keep_depth=True).config
    with torch.device("meta"):
        model = getattr(transformers, raw["architectures"][0])._from_config(config)
    return block_types(model)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("dev-set")
    return {repo_id(f): make_tiny(f, out / f.name) for f in NATIVE}


def test_dev_set_has_the_25_native_repos():
    assert len(NATIVE) == 25


@pytest.mark.parametrize("folder", NATIVE, ids=repo_id)
def test_builds_verifies_and_is_tiny(folder, built):
    result = built[repo_id(folder)]
    report = tinykit.verify(result.path)
    assert report.ok, report.problems
    assert report.loss is not None and report.loss > 0
    assert report.reload_equal is True
    weights = (result.path / "model.safetensors").stat().st_size
    assert weights <= (1_500_000 if is_multimodal(folder) else 600_000), weights


@pytest.mark.parametrize("folder", NATIVE, ids=repo_id)
def test_keeps_every_block_type_of_the_source(folder, built):
    tiny = tinykit.verify(built[repo_id(folder)].path).block_types
    assert tiny == source_block_types(folder)


@pytest.mark.parametrize(
    "name",
    [
        "Qwen/Qwen3-30B-A3B",
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "deepseek-ai/DeepSeek-R1",
        "mistralai/Mixtral-8x7B-v0.1",
        "openai/gpt-oss-20b",
        "ibm-granite/granite-3.1-1b-a400m-instruct",
    ],
)
def test_moe_sources_keep_moe(name, built):
    config = json.loads((built[name].path / "config.json").read_text())
    experts = [
        config[k] for k in ("num_experts", "num_local_experts", "n_routed_experts") if k in config
    ]
    assert experts and 2 <= max(experts) <= 4
    routed = [config[k] for k in ("num_experts_per_tok",) if k in config]
    assert all(1 <= r <= max(experts) for r in routed)


def test_deepseek_keeps_a_dense_and_an_moe_layer(built):
    kinds = tinykit.verify(built["deepseek-ai/DeepSeek-R1"].path).block_types["model.layers"]
    assert any("mlp:DeepseekV3MLP" in k for k in kinds) and any(
        "mlp:DeepseekV3MoE" in k for k in kinds
    )
    assert len(kinds) == 2


def test_qwen3_next_keeps_linear_and_full_attention(built):
    config = json.loads(
        (built["Qwen/Qwen3-Next-80B-A3B-Instruct"].path / "config.json").read_text()
    )
    assert config["layer_types"] == ["linear_attention", "full_attention"]
    assert config["num_hidden_layers"] == 2


def test_gpt_oss_keeps_sliding_and_full_attention(built):
    config = json.loads((built["openai/gpt-oss-20b"].path / "config.json").read_text())
    assert sorted(set(config["layer_types"])) == ["full_attention", "sliding_attention"]
    assert "quantization_config" not in config


def test_token_ids_stay_inside_the_vocab(built):
    for name, result in built.items():
        for file in ("config.json", "generation_config.json"):
            path = result.path / file
            if not path.is_file():
                continue
            data = json.loads(path.read_text())
            vocab = data.get("vocab_size") or data.get("text_config", {}).get("vocab_size") or 1024
            ids = [v for k, v in _flatten(data) if k.endswith(("_token_id", "_token_index"))]
            assert all(i < vocab for i in ids if isinstance(i, int)), (name, file, ids)


def _flatten(node, prefix=""):
    for k, v in node.items():
        if isinstance(v, dict):
            yield from _flatten(v)
        elif isinstance(v, list) and all(isinstance(x, int) for x in v):
            yield from ((k, x) for x in v)
        else:
            yield k, v


@pytest.mark.parametrize("name", sorted(REMOTE_ONLY))
def test_remote_code_repo_fails_cleanly_and_writes_nothing(name, tmp_path):
    out = tmp_path / "tiny"
    with pytest.raises(UnsupportedModelError, match="--trust-remote-code"):
        tinykit.make_tiny(HUB_FILES / name, out)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_vision_tower_failing_on_sample_pixels_is_a_finding_not_a_traceback(tmp_path):
    from tinykit.errors import TinyArtifactInvalid
    from tinykit.model.verify import verify

    # undo the recipe that keeps the tower's heads a multiple of 4 wide: its 2-D rotary fails
    recipe = tmp_path / "no_round.toml"
    recipe.write_text(
        'model_types = ["qwen2_5_vl_vision"]\n[derive]\nhidden_size = "hidden_size"\n'
    )
    source = HUB_FILES / "Qwen/Qwen2.5-VL-7B-Instruct"
    spec = dict(hidden=10, heads=1, kv_heads=1, recipes=(str(recipe),))
    with pytest.raises(TinyArtifactInvalid, match="sample inputs cannot be made: RuntimeError"):
        make_tiny(source, tmp_path / "checked", **spec)
    assert not (tmp_path / "checked").exists()
    make_tiny(source, tmp_path / "unchecked", check=False, **spec)
    report = verify(tmp_path / "unchecked")
    assert not report.ok and report.problems[-1].startswith("sample inputs cannot be made")


def test_the_build_check_runs_the_built_model_and_the_files_decide(tmp_path):
    """make_tiny's check runs the model it built and loads the saved folder once (the reload).
    Where the model in memory is not what the files load (a bfloat16 build's rotary table is
    cast in memory, recomputed in float32 on load), the folder is checked as loaded, and files
    that do not load fail either way."""
    import torch

    from tinykit.model.load import load_model
    from tinykit.model.verify import verify_built

    source = HUB_FILES / "meta-llama/Llama-3.2-1B-Instruct"
    out = make_tiny(source, tmp_path / "bf16", dtype="bfloat16")
    model = load_model(out.path)
    assert model.dtype == torch.bfloat16
    assert verify_built(out.path, model.to(torch.bfloat16)).ok  # its table cast, as built

    config = json.loads((out.path / "config.json").read_text())
    (out.path / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    report = verify_built(out.path, model)
    assert not report.ok and "do not match config.json" in report.problems[0]


def test_a_bfloat16_speech_model_is_checked_on_features_of_its_dtype(tmp_path):
    """The check's sample inputs are cast to the model's dtype: float32 log-mel features met a
    bfloat16 Whisper's conv bias and failed the build."""
    import torch
    import transformers

    out = make_tiny(HUB_FILES / "openai/whisper-base", tmp_path / "w", dtype="bfloat16")
    model = transformers.WhisperForConditionalGeneration.from_pretrained(out.path)
    assert model.dtype == torch.bfloat16


def test_faithful_mode_keeps_the_real_tokenizer_and_chat_template(tmp_path):
    import transformers

    out = tinykit.make_tiny(
        HUB_FILES / "mistralai/Mistral-7B-Instruct-v0.3", tmp_path / "f", mode="faithful"
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    model = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert model.config.vocab_size == len(tokenizer) == 32768
    source = transformers.AutoTokenizer.from_pretrained(
        HUB_FILES / "mistralai/Mistral-7B-Instruct-v0.3"
    )
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    ids = tokenizer.apply_chat_template(chat, tokenize=True)
    assert ids == source.apply_chat_template(
        chat, tokenize=True
    )  # real tokens, counted as the source does
    assert model.config.bos_token_id == source.bos_token_id
    assert sum(p.numel() for p in model.model.layers.parameters()) < 100_000  # the body is tiny


def test_faithful_mode_of_a_bare_model_type_is_refused_before_building(tmp_path):
    with pytest.raises(tinykit.errors.UsageError, match="--mode tiny"):
        tinykit.make_tiny("llama", tmp_path / "f", mode="faithful")
    assert list(tmp_path.iterdir()) == []
    # In a fresh interpreter: refused before the tiny tokenizer (the first thing built) is made.
    probe = (
        "import sys, tinykit\n"
        "try:\n    tinykit.make_tiny('llama', 'f', mode='faithful')\n"
        "except tinykit.errors.UsageError:\n    print('tokenizers' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.parametrize(
    "folder",
    [
        f
        for f in NATIVE
        if (f / "tokenizer_config.json").is_file() or (f / "tokenizer.json").is_file()
    ],
    ids=repo_id,
)
def test_whole_fixture_with_its_tokenizer_is_tiny_and_consistent(folder, built):
    import transformers

    result = built[repo_id(folder)]
    report = tinykit.verify(result.path)
    config = transformers.AutoConfig.from_pretrained(result.path)
    reads_tokens = getattr(transformers, config.architectures[0]).main_input_name == "input_ids"
    assert report.tokenizer is not None and report.tokenizer["ok"], report.tokenizer
    if reads_tokens:  # speech models (Whisper) read audio features, their tokenizer only decodes
        assert report.tokenizer["forward"]["finite"], report.tokenizer
    tokenizer = transformers.AutoTokenizer.from_pretrained(result.path)
    assert config.get_text_config().vocab_size == len(tokenizer) <= 1024
    if not is_multimodal(folder):
        assert result.bytes <= 1_000_000, result.files


def test_loading_any_dev_set_model_logs_no_transformers_warning(built):
    # RoPE scaling keeps its ratio after the positions shrink (Llama 3, gpt-oss, DeepSeek, Phi-3)
    assert load_warnings(r.path for r in built.values()) == ""
