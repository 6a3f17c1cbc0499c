"""Coverage fixes of #31 that recipes carry: tensors a forward requires that no processor makes
(boxes, mel features, task ids), a generation setting, a file the class loads beside the
weights, and a media model judged at full size on token ids alone. Each runs the real sweep (or
the real build and load) of the type it fixed."""

from __future__ import annotations

import pytest

from tinykit.coverage.apart import upstream_error
from tinykit.coverage.sweep import sweep
from tinykit.model.size import MULTIMODAL_BUDGET

FIXED = {
    "udop": "boxes declared, cut with generate's prompt; T5's decoder start",
    "clvp": "declared mel features, 32-wide rotary heads, return_dict_in_generate",
    "minicpm_ocr_vision": "a tower alone that reads target_sizes gets the packed strip",
    "minicpmv4_7_vision": "the same tower of another MiniCPM-V",
    "oneformer": "two main inputs, declared task ids, one decoder width",
}


@pytest.mark.parametrize("model_type", sorted(FIXED))
def test_a_type_fixed_by_a_recipe_or_input_rule_passes_within_budget(model_type, coverage_classes):
    [row] = sweep([model_type], coverage_classes)
    assert row.ok, row.reason
    assert 0 < row.weight_bytes <= MULTIMODAL_BUDGET


def test_a_class_that_loads_a_file_beside_its_weights_gets_one_at_the_tiny_geometry(
    tmp_path, coverage_classes
):
    import torch

    from tinykit.coverage.sweep import _source_folder
    from tinykit.model.build import make_tiny
    from tinykit.model.load import load_model
    from tinykit.model.size import saved_bytes

    source = _source_folder(tmp_path, "qwen2_5_omni", coverage_classes["qwen2_5_omni"])
    built = make_tiny(source, tmp_path / "tiny", check=False)
    speakers = torch.load(built.path / "spk_dict.pt", weights_only=True)
    model = load_model(built.path)  # from_pretrained refuses a folder without spk_dict.pt
    dit = model.config.token2wav_config.dit_config
    assert speakers["Chelsie"]["cond"].shape == (1, dit.enc_emb_dim)
    assert speakers["Chelsie"]["ref_mel"].shape[-1] == dit.mel_dim
    assert model.speaker_map.keys() == {"Chelsie"}
    # the token2wav stages are shrunk too (471 MB before their recipes)
    assert saved_bytes(built.path) <= MULTIMODAL_BUDGET


def test_a_media_model_whose_recipe_says_so_is_judged_at_full_size_on_token_ids():
    # Llama 4 reads image_outputs off its language model's output, which has none
    error = upstream_error("llama4", "Llama4ForConditionalGeneration")
    assert error is not None and "has no attribute 'image_outputs'" in error
    # without the recipe's word a media model is not judged on token ids (CLAP's audio)
    assert upstream_error("clap", "ClapModel") is None
