"""Coverage of heads that train, reload or validate unlike a plain LM (#31): heads transformers
refuses labels to, encoders that emit integer codes only, heads transformers maps no loss to,
token-id ranges of codebooks, a sliding window the class leaves unset, and a vision tower whose
eval activations underflow at the default init.

Config checks build no model; each sweep runs the real build + verify of one type.
"""

from __future__ import annotations

import pytest

from tinykit.coverage.apart import is_upstream, unmapped_loss, upstream_error
from tinykit.coverage.sweep import sweep
from tinykit.model.config import shrink_config
from tinykit.model.size import MULTIMODAL_BUDGET
from tinykit.model.spec import ShrinkSpec
from tinykit.model.verify import REFUSES_TRAINING


def _shrunk(model_type: str, **spec):
    return shrink_config({"model_type": model_type}, ShrinkSpec(**spec)).config


@pytest.mark.parametrize("vocab", [512, 1024, 4096])
def test_codebook_token_ranges_follow_the_shrunk_vocab(vocab):
    config = _shrunk("apertus1p5", vocab=vocab)  # validated on build: it raised before
    image, audio = config.vision_config.codebook_size, config.audio_config.codebook_size
    assert config.image_token_offset + image == config.audio_token_offset
    assert config.audio_token_offset + audio <= config.text_config.vocab_size == vocab
    # the placeholders past the tiny vocab are moved above the code ranges, not into them
    for token in (config.image_token_id, config.audio_token_id):
        assert token >= config.audio_token_offset + audio


def test_a_sliding_window_the_class_leaves_unset_is_given_and_its_heads_shrunk():
    text = _shrunk("step3p7").text_config
    assert text.sliding_window == 8  # None: every forward raised building its sliding mask
    assert text.num_sliding_attention_heads <= text.num_attention_heads


def test_align_vision_tower_is_initialised_so_eval_activations_stay_finite():
    assert _shrunk("align").vision_config.initializer_range == 0.3


def test_refusals_of_labels_are_recognised_as_transformers_words_them():
    for message in (
        "PPDocLayoutV4ForObjectDetection does not support training",
        "Training of VITS is not supported yet.",
        "Training is not implemented yet",
        "Training is not yet supported",
    ):
        assert REFUSES_TRAINING.search(message), message
    assert not REFUSES_TRAINING.search("ForCausalLMLoss() missing 1 required positional argument")


def test_a_head_transformers_maps_no_loss_to_is_set_apart_only_for_that_loss():
    import torch
    import transformers

    from tinykit.model.build import class_and_config
    from tinykit.model.config import load_config

    raw = {"model_type": "nemotron_asr_streaming"}
    cls, config = class_and_config(
        raw, load_config(raw), requested=transformers.NemotronAsrStreamingForRNNT
    )
    with torch.device("meta"):  # full size, as the sweep's check builds it
        model = cls._from_config(config)
    error = unmapped_loss(model)
    assert error is not None and "NemotronAsrStreamingForRNNT" in error
    assert upstream_error("nemotron_asr_streaming", "NemotronAsrStreamingForRNNT") == error
    loss_failure = "forward failed: TypeError: ForCausalLMLoss() missing 1 required positional argument: 'vocab_size'"
    assert is_upstream(loss_failure, error)
    assert not is_upstream("forward failed: RuntimeError: shapes do not match", error)


# One type per route (each a real build + verify): code ranges and image_sizes (Apertus 1.5), an
# unset sliding window (Step 3.7), eval activations that underflowed (ALIGN); labels refused and
# integer codes only are verified below, their reports read.
FIXED = ["apertus1p5", "step3p7", "align"]


@pytest.mark.parametrize("model_type", FIXED)
def test_heads_that_train_or_reload_unlike_an_lm_pass_within_the_budget(
    model_type, coverage_classes
):
    [row] = sweep([model_type], coverage_classes)
    assert row.ok, row.reason
    assert 0 < row.weight_bytes <= MULTIMODAL_BUDGET


def test_a_head_that_refuses_labels_and_a_codes_only_encoder_are_trained_and_compared(
    tmp_path, coverage_classes
):
    from tinykit.coverage.sweep import _source_folder
    from tinykit.model.build import make_tiny
    from tinykit.model.verify import verify

    for model_type in ("pp_doclayout_v4", "wavtokenizer_encoder"):
        source = _source_folder(tmp_path, model_type, coverage_classes[model_type])
        built = make_tiny(source, tmp_path / model_type, check=False)
        report = verify(built.path)
        assert report.ok, report.problems
        assert report.reload_equal is True and report.loss is not None
        assert not report.grads.endswith(" 0/0 parameter tensors got a gradient")
        if model_type == "pp_doclayout_v4":
            assert report.grads.startswith("labels refused (ValueError: PPDocLayoutV4")
