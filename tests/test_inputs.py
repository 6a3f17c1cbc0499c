"""make_inputs, the one input maker: on tiny models built from real Hub configs of each modality
(a text decoder, an encoder-decoder, a VLM, a speech model) it makes what the forward takes, the
forward runs on it, and a training step on its labels gives a finite loss."""

from __future__ import annotations

import functools
import inspect
import json

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import HUB_FILES
from tinykit.model.config import shrink_config
from tinykit.model.inputs import Inputs, make_inputs
from tinykit.model.inputs.media import MODALITIES
from tinykit.model.spec import ShrinkSpec

# repo -> (the forward arguments made without labels, the labels made with them)
CASES = {
    "Qwen/Qwen3-8B": ({"input_ids"}, {"labels"}),
    "google-t5/t5-base": ({"input_ids", "decoder_input_ids"}, {"labels"}),
    "llava-hf/llava-1.5-7b-hf": ({"input_ids", "pixel_values"}, {"labels"}),
    "openai/whisper-base": ({"input_features", "decoder_input_ids"}, {"labels"}),
}


@functools.cache
def tiny(repo: str):
    """A tiny random model of the repo's config.json, built with the class it names."""
    raw = json.loads((HUB_FILES / repo / "config.json").read_text())
    config = shrink_config(raw, ShrinkSpec()).config
    torch.manual_seed(0)
    return getattr(transformers, raw["architectures"][0])._from_config(config).eval()


def _equal(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("repo", list(CASES))
def test_inputs_are_forward_arguments_the_forward_runs_on(repo):
    model = tiny(repo)
    made = make_inputs(model)
    wanted, _ = CASES[repo]
    assert set(made.forward) == wanted and made.labels == {}
    assert set(made.forward) <= set(inspect.signature(model.forward).parameters)
    assert all(v.shape[0] == 2 for v in made.forward.values())  # the default batch
    with torch.no_grad():
        logits = model(**made.forward).logits
    assert logits.shape[0] == 2 and torch.isfinite(logits).all()


@pytest.mark.parametrize("repo", list(CASES))
def test_labels_train_and_the_same_generator_seed_gives_the_same_inputs(repo):
    model = tiny(repo)
    made = make_inputs(model, labels=True)
    _, labels = CASES[repo]
    assert set(made.labels) == labels
    out = model.train()(**made.forward, **made.labels)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert any(p.grad is not None for p in model.parameters())
    model.zero_grad(set_to_none=True)
    model.eval()
    again = make_inputs(model, labels=True, generator=torch.Generator().manual_seed(0))
    assert _equal(made.forward, again.forward) and _equal(made.labels, again.labels)
    other = make_inputs(model, labels=True, generator=torch.Generator().manual_seed(1))
    assert not _equal(made.forward, other.forward)


def test_a_decoder_is_trained_on_its_own_ids():
    made = make_inputs(tiny("Qwen/Qwen3-8B"), labels=True)
    assert torch.equal(made.labels["labels"], made.forward["input_ids"])


def test_an_encoder_decoders_decoder_reads_the_encoders_ids_and_with_labels_half_as_many():
    model = tiny("google-t5/t5-base")
    plain = make_inputs(model)
    assert torch.equal(plain.forward["decoder_input_ids"], plain.forward["input_ids"])
    trained = make_inputs(model, labels=True)
    assert trained.forward["input_ids"].shape == (2, 16)
    assert trained.labels["labels"].shape == trained.forward["decoder_input_ids"].shape == (2, 8)


def test_a_vlms_text_holds_one_image_token_per_image_feature():
    model = tiny("llava-hf/llava-1.5-7b-hf")
    made = make_inputs(model)
    ids, token = made.forward["input_ids"], model.config.image_token_index
    vision = model.config.vision_config  # one feature per patch (the CLS one is dropped)
    assert model.config.vision_feature_select_strategy == "default"
    per_image = (vision.image_size // vision.patch_size) ** 2
    assert per_image > 0 and bool(((ids == token).sum(1) == per_image).all())
    assert not bool((ids[:, per_image:] == token).any())  # the random text holds none itself


def test_a_tokenizers_text_is_used_as_given_and_goes_without_optional_images():
    model = tiny("llava-hf/llava-1.5-7b-hf")
    text = torch.tensor([[5, 6, 7, 8, 9]] * 3)
    made = make_inputs(model, text=text)
    assert set(made.forward) == {"input_ids"} and torch.equal(made.forward["input_ids"], text)
    with torch.no_grad():
        assert model(**made.forward).logits.shape[:2] == (3, 5)


def test_speech_features_fill_the_encoders_window():
    model = tiny("openai/whisper-base")
    features = make_inputs(model).forward["input_features"]
    frames = 2 * model.config.max_source_positions  # Whisper-style encoders need exactly these
    assert features.shape == (2, model.config.num_mel_bins, frames)


@settings(max_examples=10, deadline=None)
@given(batch=st.integers(1, 3), seq=st.integers(2, 24))
def test_batch_and_seq_shape_the_text(batch, seq):
    made = make_inputs(tiny("Qwen/Qwen3-8B"), batch=batch, seq=seq, labels=True)
    ids = made.forward["input_ids"]
    assert ids.shape == (batch, seq) and int(ids.max()) < tiny("Qwen/Qwen3-8B").config.vocab_size


def test_inputs_move_and_cast_floats_to_the_models_dtype():
    made = make_inputs(tiny("llava-hf/llava-1.5-7b-hf"), labels=True)
    moved = made.to("cpu", torch.bfloat16)
    assert isinstance(moved, Inputs)
    assert moved.forward["pixel_values"].dtype == torch.bfloat16
    assert moved.forward["input_ids"].dtype == torch.long  # ids stay integers
    assert torch.equal(moved.labels["labels"], made.labels["labels"])


def test_modalities_are_one_table_of_named_rows():
    names = [name for name, _applies, _make in MODALITIES]
    assert len(names) == len(set(names))
    # the more specific rows come first: a waveform with features before a waveform alone,
    # a patch grid and video frames before plain pixels
    assert names.index("waveform and features") < names.index("waveform")
    assert max(names.index("patch grid"), names.index("video")) < names.index("image")
