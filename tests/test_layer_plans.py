"""Layer plans on real configs: one layer of every block type, per-layer fields rewritten in lockstep."""

from __future__ import annotations

import json

import pytest
from conftest import HUB_FILES

from tinykit.errors import ShrinkConstraintError
from tinykit.model.config import shrink_config
from tinykit.model.spec import ShrinkSpec


def shrink(name, **spec):
    raw = json.loads((HUB_FILES / name / "config.json").read_text())
    return shrink_config(raw, ShrinkSpec(**spec))


def test_qwen3_next_keeps_a_linear_and_a_full_attention_layer():
    s = shrink("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert s.plans["."].kept == (0, 3)  # full attention every 4th layer in the source
    assert s.config.layer_types == ["linear_attention", "full_attention"]


def test_deepseek_keeps_a_dense_and_an_moe_layer_and_recounts_the_dense_prefix():
    s = shrink("deepseek-ai/DeepSeek-R1")
    assert s.plans["."].kept == (0, 3)  # first_k_dense_replace = 3 in the source
    c = s.config
    assert (c.num_hidden_layers, c.first_k_dense_replace, c.moe_layer_freq) == (2, 1, 1)
    assert (
        c.n_routed_experts == 4
        and c.num_experts_per_tok == 2
        and c.n_group == 1
        and c.topk_group == 1
    )
    assert c.qk_head_dim == c.qk_nope_head_dim + c.qk_rope_head_dim  # MLA shrunk consistently
    assert c.kv_lora_rank <= 16 and c.q_lora_rank <= 16


def test_qwen2_5_vl_vision_keeps_a_window_and_a_full_attention_block():
    s = shrink("Qwen/Qwen2.5-VL-7B-Instruct")
    assert s.plans["vision_config."].kept == (0, 7)  # fullatt_block_indexes = [7, 15, 23, 31]
    assert s.config.vision_config.fullatt_block_indexes == [1]
    assert s.config.vision_config.depth == 2
    assert s.config.vision_config.out_hidden_size == s.config.text_config.hidden_size
    section = s.config.text_config.rope_parameters["mrope_section"]
    assert (
        sum(section)
        == s.config.text_config.hidden_size // s.config.text_config.num_attention_heads // 2
    )


@pytest.mark.parametrize(("hidden", "heads"), [(10, 1), (20, 2), (12, 1), (32, 4)])
def test_qwen2_5_vl_vision_heads_fit_its_2d_rotary_grid(hidden, heads):
    # the tower rotates head_dim // 2 frequencies per image axis: head_dim must be a multiple of 4
    vision = shrink("Qwen/Qwen2.5-VL-7B-Instruct", hidden=hidden, heads=heads, kv_heads=1)
    vision = vision.config.vision_config
    assert (vision.hidden_size // vision.num_heads) % 4 == 0
    assert vision.hidden_size <= hidden and vision.out_hidden_size == hidden


def test_gemma3_keeps_per_layer_type_rope_parameters_keyed():
    s = shrink("google/gemma-3-4b-it")
    text = s.config.text_config
    assert text.layer_types == ["sliding_attention", "full_attention"]
    assert set(text.rope_parameters) == {"sliding_attention", "full_attention"}
    assert text.head_dim == text.hidden_size // text.num_attention_heads
    vision = s.config.vision_config
    assert vision.image_size % vision.patch_size == 0
    assert s.config.mm_tokens_per_image == (vision.image_size // vision.patch_size // 2) ** 2


def test_explicit_layer_count_adds_layers_in_source_order():
    s = shrink("Qwen/Qwen3-8B", layers=3)
    assert s.plans["."].kept == (0, 1, 2) and s.config.num_hidden_layers == 3


def test_too_few_layers_to_keep_every_block_type_is_refused():
    with pytest.raises(ShrinkConstraintError, match="cannot keep all 2 block types") as e:
        shrink("deepseek-ai/DeepSeek-R1", layers=1)
    assert e.value.field == "layers"


def test_grouped_query_attention_keeps_heads_divisible_by_kv_heads():
    c = shrink("meta-llama/Llama-3.2-1B-Instruct", hidden=64, heads=8, kv_heads=2).config
    assert c.hidden_size % c.num_attention_heads == 0
    assert c.num_attention_heads % c.num_key_value_heads == 0
    assert c.head_dim == 8  # the source's explicit head_dim (64) is shrunk too


def test_multi_head_sources_stay_multi_head():
    c = shrink("openai-community/gpt2-xl").config
    assert c.n_head == 4 and c.n_embd == 32


def test_tied_embeddings_follow_the_source():
    assert shrink("meta-llama/Llama-3.2-1B-Instruct").config.tie_word_embeddings is True
    assert shrink("meta-llama/Llama-2-7b-hf").config.tie_word_embeddings is False


def test_phi3_longrope_factors_match_the_new_head_dim():
    c = shrink("microsoft/Phi-3-mini-128k-instruct").config
    half = c.hidden_size // c.num_attention_heads // 2
    assert len(c.rope_parameters["long_factor"]) == len(c.rope_parameters["short_factor"]) == half
