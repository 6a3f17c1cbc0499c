"""Coverage of multimodal types (a..lig): the shrink rules and sample inputs they needed.

Config checks build no model (a fraction of a second each); one sampled sweep runs the input
rules that only a built model shows (InstructBLIP: Q-Former ids, required pixels on the probe).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tinykit.coverage.sweep import sweep
from tinykit.model.config import shrink_config
from tinykit.model.shrink.rope import split_like
from tinykit.model.size import MULTIMODAL_BUDGET
from tinykit.model.spec import ShrinkSpec


def _shrunk(model_type: str, **spec):
    return shrink_config({"model_type": model_type}, ShrinkSpec(**spec)).config


@given(
    pair=st.integers(1, 64), other=st.integers(1, 64), total=st.integers(3, 64), swap=st.booleans()
)
def test_mrope_sections_equal_in_the_source_stay_equal_and_fill_the_head(pair, other, total, swap):
    parts = [other, pair, pair] if swap else [pair, pair, other]
    out = split_like(parts, total)
    assert sum(out) == total and all(v >= 1 for v in out)
    if pair != other:  # the two equal sections, wherever they are, stay equal
        equal = [v for v, p in zip(out, parts, strict=True) if p == pair]
        assert len(set(equal)) == 1


def test_ernie_vl_height_and_width_sections_stay_equal():
    text = _shrunk("ernie4_5_vl_moe").text_config
    section = text.rope_parameters["mrope_section"]
    assert section[0] == section[1]  # its rotary embedding interleaves height and width
    assert sum(section) == text.hidden_size // text.num_attention_heads // 2


def test_box_embeddings_of_layoutlmv3_fill_its_width():
    config = _shrunk("layoutlmv3")
    assert 4 * config.coordinate_size + 2 * config.shape_size == config.hidden_size


def test_towers_with_fixed_head_widths_and_scaled_stages_fit_their_projections():
    bridge = _shrunk("bridgetower").vision_config
    assert bridge.hidden_size // 64 >= 1  # 64-wide heads, hard-coded
    align = _shrunk("align")  # the pooled image features meet the text projection
    assert align.vision_config.width_coefficient == 1.0
    assert max(align.vision_config.out_channels) == align.projection_dim


def test_side_towers_are_shrunk_with_the_main_one():
    evolla = _shrunk("evolla")  # the protein resampler: 6 layers of 8 heads of 64 before
    assert evolla.resampler_depth <= 2 and evolla.resampler_dim_head <= 32
    janus = _shrunk("janus").vq_config  # the VQ image tokenizer: 5 levels up to 4 x 128 before
    assert janus.channel_multiplier == [1, 1] and janus.num_res_blocks == 1


def test_a_qformer_model_trains_on_instruction_ids_and_required_pixels(coverage_classes):
    rows = list(sweep(["instructblip"], coverage_classes))
    assert [(r.model_type, r.reason) for r in rows if not r.ok] == []
    assert all(0 < r.weight_bytes <= MULTIMODAL_BUDGET for r in rows)


def test_roberta_style_pad_ids_stay_inside_their_position_tables(coverage_classes):
    """Kosmos-2 and LayoutLMv3 pad their position tables (max_position_embeddings rows) at
    pad_token_id = 1: a trained tokenizer's <|pad|> moved to the vocabulary's end broke both."""
    rows = list(sweep(["kosmos-2", "layoutlmv3"], coverage_classes))
    assert [(r.model_type, r.reason) for r in rows if not r.ok] == []
    assert all(0 < r.weight_bytes <= MULTIMODAL_BUDGET for r in rows)


def test_layout_tokenizers_are_told_apart_by_their_boxes_argument():
    import transformers

    from tinykit.tokenizer.check import reads_words

    assert reads_words(transformers.LayoutLMv3TokenizerFast)
    assert not reads_words(transformers.BertTokenizerFast)
