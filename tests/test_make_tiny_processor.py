"""The processor files make-tiny ships (frontend/ and model/inputs/processor.py): built from a bare model_type at the
tiny geometry around the tiny tokenizer, loaded back with transformers' auto classes, and run
through the tiny model: the image placeholder expands to as many tokens as the tower yields
features, the feature extractor fills the encoder's window, the video frames fit the tower."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers
from conftest import HUB_FILES

from tinykit.frontend.processor_files import shipped_processor
from tinykit.model.build import make_tiny
from tinykit.model.inputs.placement import image_feature_count
from tinykit.model.load import load_model

RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """Folders built from a bare model_type, one per type asked for."""
    out = tmp_path_factory.mktemp("bare")
    built = {}

    def get(model_type: str):
        if model_type not in built:
            built[model_type] = make_tiny(model_type, out / model_type, check=False).path
        return built[model_type]

    return get


def _image(height: int, width: int) -> np.ndarray:
    return RNG.integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize(
    ("model_type", "processor_class"),
    [
        ("idefics3", "Idefics3Processor"),  # image_seq_len: the tiny tower's count
        ("llava", "LlavaProcessor"),  # patch size from the tower, the CLS token counted
    ],
)
def test_a_bare_vlm_expands_its_image_placeholder_to_the_towers_features(
    bare, model_type, processor_class
):
    folder = bare(model_type)
    assert (folder / "processor_config.json").is_file()
    processor = transformers.AutoProcessor.from_pretrained(folder)
    assert type(processor).__name__ == processor_class
    model = load_model(folder).eval()
    config = model.config
    # the processor wraps the tokenizer the folder ships, its image token inside the tiny vocab
    tokenizer = processor.tokenizer
    assert len(tokenizer) == config.text_config.vocab_size
    assert processor.image_token_id == config.image_token_id
    assert tokenizer.convert_ids_to_tokens(config.image_token_id) == processor.image_token
    # a photo of another size and shape than the tower's
    images = [_image(3 * config.vision_config.image_size, 2 * config.vision_config.image_size)]
    out = processor(text=[f"{processor.image_token} a cat"], images=images, return_tensors="pt")
    tokens = int((out["input_ids"] == config.image_token_id).sum())
    assert tokens == image_feature_count(model, dict(out)) > 0
    with torch.no_grad():
        logits = model(**out).logits
    assert logits.shape == (1, out["input_ids"].shape[1], config.text_config.vocab_size)


def test_the_shipped_tokens_are_special_and_the_folder_is_tiny(bare):
    folder = bare("idefics3")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    added = tokenizer.get_added_vocab()
    # what Idefics3's processor adds as it is built: present, so loading adds nothing
    tokens = ("<fake_token_around_image>", "<image>", "<end_of_utterance>")
    assert all(t in added for t in tokens)
    ids = tokenizer("".join(f"a{t}" for t in tokens))["input_ids"]
    assert all(ids.count(added[t]) == 1 for t in tokens)  # each one token, never split
    assert not any(t in tokenizer.decode(ids, skip_special_tokens=True) for t in tokens)
    processor = json.loads((folder / "processor_config.json").read_text())
    assert processor["image_seq_len"] == 4  # (32 / 8)^2 patches merged 2 x 2
    assert processor["image_processor"]["max_image_size"] == {"longest_edge": 32}


def test_a_bare_speech_model_ships_a_processor_filling_the_encoders_window(bare):
    folder = bare("whisper")
    processor = transformers.AutoProcessor.from_pretrained(folder)
    assert type(processor).__name__ == "WhisperProcessor"
    model = load_model(folder).eval()
    window = 2 * model.config.max_source_positions
    audio = RNG.standard_normal(16_000 * 3).astype(np.float32)  # three seconds
    features = processor(audio=[audio], sampling_rate=16_000, return_tensors="pt")
    assert features["input_features"].shape == (1, model.config.num_mel_bins, window)
    ids = processor(text=["hello"], return_tensors="pt")["input_ids"]
    assert int(ids.max()) < model.config.vocab_size
    with torch.no_grad():
        model(input_features=features["input_features"], decoder_input_ids=ids)


def test_a_bare_video_classifier_ships_a_processor_of_its_frames(bare):
    folder = bare("videomae")
    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    model = load_model(folder).eval()
    frames, side = model.config.num_frames, model.config.image_size
    video = [_image(2 * side, 3 * side) for _ in range(frames)]
    pixels = processor([video], return_tensors="pt")["pixel_values"]
    assert pixels.shape == (1, frames, 3, side, side)
    with torch.no_grad():
        hidden = model(pixel_values=pixels).last_hidden_state
    assert hidden.shape[0] == 1 and hidden.shape[-1] == model.config.hidden_size


def test_what_loads_a_folders_processor_is_named(bare, tmp_path):
    assert shipped_processor(bare("idefics3")) == "AutoProcessor: Idefics3Processor"
    assert shipped_processor(bare("videomae")).startswith("AutoProcessor: VideoMAEImageProcessor")
    assert shipped_processor(tmp_path) == ""  # no processor files
    (tmp_path / "preprocessor_config.json").write_text("{not json")
    assert shipped_processor(tmp_path).startswith("fails: AutoProcessor: ")


def test_same_inputs_give_the_same_processor_and_tokenizer_bytes(bare, tmp_path):
    again = make_tiny("idefics3", tmp_path / "again", check=False).path
    for name in ("processor_config.json", "tokenizer.json", "tokenizer_config.json", "config.json"):
        assert (again / name).read_bytes() == (bare("idefics3") / name).read_bytes(), name


def test_a_source_with_processor_files_keeps_them_at_the_tiny_geometry(tmp_path):
    folder = make_tiny(
        HUB_FILES / "llava-hf" / "llava-1.5-7b-hf", tmp_path / "llava", check=False
    ).path
    processor = transformers.AutoProcessor.from_pretrained(folder)
    model = load_model(folder).eval()
    side = model.config.vision_config.image_size
    assert processor.image_processor.crop_size["height"] == side
    assert processor.patch_size == model.config.vision_config.patch_size
    out = processor(text=["<image> a cat"], images=[_image(48, 64)], return_tensors="pt")
    assert int((out["input_ids"] == model.config.image_token_id).sum()) == image_feature_count(
        model, dict(out)
    )
    with torch.no_grad():
        model(**out)
