"""Coverage of the --all text group beyond the LM classes: towers alone, document and
trajectory models, forecasters, whose forwards read more than token ids."""

from __future__ import annotations

from tinykit.coverage.sweep import sweep
from tinykit.model.config import shrink_config
from tinykit.model.size import TEXT_BUDGET
from tinykit.model.spec import ShrinkSpec


def _shrunk(model_type: str, **spec):
    return shrink_config({"model_type": model_type}, ShrinkSpec(**spec)).config


def test_kv_reuse_lists_plan_by_own_or_shared_not_by_value():
    # kv_source_layers = [0, 1, ..., 71] (every layer its own cache) made 72 block types
    config = _shrunk("mistral_large4_text")
    assert config.num_hidden_layers < 8
    assert config.kv_source_layers == list(range(config.num_hidden_layers))
    # a pattern of the source (every 4th layer without RoPE) survives
    assert set(config.no_rope_layers) == {0, 1}


def test_zero_padded_per_layer_overrides_follow_their_layer():
    # EmbeddingGemma 2 widens the heads of its full-attention layers ("05", "11", ...)
    config = _shrunk("embedding_gemma2_text")
    full = [i for i, t in enumerate(config.layer_types) if t == "full_attention"]
    overrides = config.to_diff_dict()["per_layer_config"]
    assert full == [1] and sorted(int(k) for k in overrides) == full


def test_a_zero_width_means_none_and_stays_zero():
    config = _shrunk("dpr")  # projection_dim 0: no projection layer
    assert config.projection_dim == 0 and config.hidden_size == ShrinkSpec().hidden


# One type per fix, a second or two each: declared inputs (the Q-Former's query embeddings and
# image features, TimesFM's padding and frequency), a channel axis named by num_input_channels
# (PatchTSMixer), a text tower no task table lists that needs a trained tokenizer
# (MuseGlimmer's), per-token boxes with box embeddings the class would size from a tiny width
# (BROS's). The whole group is `tinykit coverage --all` (nox -s coverage -- --all).
SAMPLED = ["blip_2_qformer", "timesfm", "patchtsmixer", "muse_glimmer_text", "bros"]


def test_sampled_text_towers_pass_within_the_budget(coverage_classes):
    rows = list(sweep(SAMPLED, coverage_classes))
    assert [(r.model_type, r.reason) for r in rows if not r.ok] == []
    assert all(0 < r.weight_bytes <= TEXT_BUDGET for r in rows)
