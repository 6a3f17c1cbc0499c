"""Coverage of non-text groups: per-stage vision lists, patch-merging towers, M-RoPE defaults,
and the sweep's summary figures."""

from __future__ import annotations

import pytest

from tinykit.coverage.apart import missing_package
from tinykit.coverage.sweep import CoverageRow, figures, summarize, summary_lines, sweep
from tinykit.model.config import shrink_config
from tinykit.model.size import MULTIMODAL_BUDGET, dim_limit
from tinykit.model.spec import ShrinkSpec


def _shrunk(model_type: str, **spec):
    return shrink_config({"model_type": model_type}, ShrinkSpec(**spec)).config


def test_per_stage_widths_and_depths_of_a_backbone_are_capped_entry_by_entry():
    config = _shrunk("resnet")  # [256, 512, 1024, 2048] wide, [3, 4, 6, 3] deep
    assert config.hidden_sizes == [32, 32, 32, 32]
    assert config.depths == [2, 2, 2, 2]
    assert _shrunk("resnet", layers=1).depths == [1, 1, 1, 1]


def test_per_stage_heads_divide_every_stage_width():
    config = _shrunk("segformer")  # 5 heads at a 160-wide stage before shrinking
    assert all(
        w % h == 0 for w, h in zip(config.hidden_sizes, config.num_attention_heads, strict=True)
    )
    assert max(config.num_attention_heads) <= ShrinkSpec().heads


def test_lists_a_config_derives_from_its_fields_follow_the_shrunk_fields():
    # EfficientLoFTR computes per-block channel lists from out_features; the source's
    # full-size lists, saved beside the fields, must not be set back over them
    config = _shrunk("efficientloftr")
    assert config.out_features == [32, 32, 32, 32]
    assert max(max(stage) for stage in config.stage_block_out_channels) == 32
    assert config.fine_fusion_dims == [32, 32, 32]


def test_hiera_stage_widths_keep_growing_and_the_neck_reads_them():
    # SAM2's Hiera pools its skip connection only where the width changes between stages
    config = _shrunk("sam2")
    widths = config.vision_config.backbone_config.embed_dim_per_stage
    assert widths == sorted(set(widths)) and widths[-1] <= ShrinkSpec().hidden
    assert config.vision_config.backbone_channel_list == widths[::-1]
    assert config.vision_config.backbone_feature_sizes == [[8, 8], [4, 4], [2, 2]]


def test_an_absent_mrope_section_is_given_one_that_fits_the_tiny_head():
    # Qwen2-VL's model falls back to [16, 24, 24] (a 128-wide head) when the key is absent
    from transformers import CONFIG_MAPPING

    assert "mrope_section" not in CONFIG_MAPPING["qwen2_vl"]().text_config.rope_parameters
    text = _shrunk("qwen2_vl").text_config
    head_dim = text.hidden_size // text.num_attention_heads
    assert sum(text.rope_parameters["mrope_section"]) == head_dim // 2
    # a partial rotary factor halves the rotated width (GLM-4V-MoE)
    moe = _shrunk("glm4v_moe").text_config
    moe_head = getattr(moe, "head_dim", None) or moe.hidden_size // moe.num_attention_heads
    assert sum(moe.rope_parameters["mrope_section"]) == int(moe_head * 0.5) // 2


def test_summary_figures_count_upstream_failures_apart():
    rows = [
        CoverageRow("a", True, "ok", 1, 1.0),
        CoverageRow("b", False, "forward failed", 1, 3.0),
        CoverageRow("c", False, "x", 0, 2.0, upstream=True),
        CoverageRow("d", False, "requires the timm library but ...", 0, 9.0, needs="timm"),
    ]
    got = figures(rows)
    assert (got["passed"], got["total"], got["buildable"], got["upstream_broken"]) == (
        1,
        4,
        2,
        ["c"],
    )
    assert got["needs_package"] == {"d": "timm"}
    assert (got["rate_buildable"], got["median_seconds"], got["seconds"]) == (0.5, 2.5, 15.0)
    groups = {"a": "vision", "b": "vision", "c": "audio", "d": "vision"}
    report = summarize(rows, groups)
    assert report["groups"]["vision"]["total"] == 3 and report["groups"]["audio"]["buildable"] == 0
    assert [r["group"] for r in report["rows"]] == ["vision", "vision", "audio", "vision"]
    assert summary_lines(report)[0].endswith("(needs timm: d)")


def test_a_type_that_needs_a_missing_package_is_set_apart_naming_it(coverage_classes):
    import importlib.util

    if importlib.util.find_spec("timm") is not None:
        pytest.skip("timm is installed here: timm_wrapper builds")
    [row] = sweep(["timm_wrapper"], coverage_classes)
    assert (row.ok, row.upstream, row.needs) == (False, False, "timm"), row.reason
    assert "timm" in row.reason
    assert missing_package("No module named 'natten.functional'") == "natten"
    assert missing_package("scheduler requires `diffusers`. Install it with pip") == "diffusers"
    assert missing_package("shape mismatch: [4, 8] vs [4, 16]") == ""


def test_any_resolution_grids_and_tower_layer_indexes_follow_the_tiny_tower():
    next_ = _shrunk("llava_next")  # pinpoints are multiples of a 336-pixel tile at full size
    side = next_.vision_config.image_size
    assert side < 336 and all(v % side == 0 for pair in next_.image_grid_pinpoints for v in pair)
    vip = _shrunk("vipllava")  # five layers of a 24-layer tower: [-2, -5, -8, -11, 6]
    depth = vip.vision_config.num_hidden_layers
    assert len(vip.vision_feature_layers) == 5
    assert all(-(depth + 1) <= i <= depth for i in vip.vision_feature_layers)


# One type per non-text fix: per-stage lists, BatchNorm backbones, a patch-merging tower alone,
# an M-RoPE image-text model with its default mrope_section absent, log-mel features read time-major
# (Parakeet) and with a required frame mask in whole attention chunks (Qwen3-ASR), a codec's
# (batch, channels, samples) waveform (Mimi), an image-text default given an image token (MiniCPM-V). The whole --all sweep is
# `nox -s coverage -- --all` (TINYKIT_RUN_SWEEP=1 in tests/test_size.py runs the text one).
SAMPLED = [
    "resnet",
    "swin",
    "qwen2_5_vl_vision",
    "qwen2_vl",
    "parakeet_encoder",
    "qwen3_asr_encoder",
    "mimi_encoder",
    "yolos",  # a detector trained on per-image targets (classes, boxes, masks)
    "video_llama_3_vision",  # a patch-grid tower that also reads each image's merge size
    "minicpmv4_6",  # no image token by default; packed patches with a target_sizes grid
    "gradium_phonon_tts",  # trained on continuous latent frames after an audio start token
    "granite_speech5_encoder",  # random mel + delta features of stacked frame pairs (4 x bins)
]


def test_sampled_non_text_types_pass_within_the_budget(coverage_classes):
    rows = list(sweep(SAMPLED, coverage_classes))
    assert [(r.model_type, r.reason) for r in rows if not r.ok] == []
    assert all(0 < r.weight_bytes <= MULTIMODAL_BUDGET for r in rows)


# One type per input a forward requires that no processor made (#31): SegGPT's half-height
# prompt image and mask, PI0's robot state and camera pixels, Voxtral Realtime's per-token mel
# frames, Pop2Piano's input_features and composer table for generate (recipes/), a vision tower
# alone fed its composite processor's image_position_ids as pixel_position_ids (Gemma 4), frames
# as pixel_values behind a video token (InstructBLIP-Video), and an image classifier over
# pixel-cluster ids that trains on its outputs (ImageGPT).
DECLARED = ["seggpt", "pi0", "voxtral_realtime", "pop2piano", "gemma4_vision"]
DECLARED += ["instructblipvideo", "imagegpt"]


@pytest.mark.parametrize("model_type", DECLARED)
def test_types_fed_declared_or_renamed_inputs_pass(model_type, coverage_classes):
    [row] = sweep([model_type], coverage_classes)
    assert row.ok, row.reason
    assert 0 < row.weight_bytes <= MULTIMODAL_BUDGET


# One type per route of the processor files a bare type ships (frontend/, model/inputs/processor.py): a placeholder
# expanded by a count setting (Idefics3) or by patches and a CLS token (LLaVA), named tokens its
# tiny tokenizer lacked (Gemma 3's boi/eoi), a speech encoder's window (Whisper), a video
# classifier's frames (VideoMAE), an image processor alone (ConvNeXt: a shortest edge), a
# waveform extractor alone (wav2vec2). The whole sweep's figure: `nox -s coverage -- --all`.
SAMPLED_PROCESSORS = {
    "idefics3": "AutoProcessor: Idefics3Processor",
    "llava": "AutoProcessor: LlavaProcessor",
    "gemma3": "AutoProcessor: Gemma3Processor",
    "whisper": "AutoProcessor: WhisperProcessor",
    "videomae": "AutoProcessor: VideoMAEImageProcessorPil",
    "convnext": "AutoProcessor: ConvNextImageProcessorPil",
    "wav2vec2": "AutoFeatureExtractor: Wav2Vec2FeatureExtractor",
}


def test_sampled_types_ship_processor_files_that_load(coverage_classes):
    rows = list(sweep(list(SAMPLED_PROCESSORS), coverage_classes))
    assert [(r.model_type, r.reason) for r in rows if not r.ok] == []
    assert {r.model_type: r.processor for r in rows} == SAMPLED_PROCESSORS
    assert figures(rows)["processors"] == len(SAMPLED_PROCESSORS)


def test_layers_that_read_another_layers_kv_keep_their_source():
    from transformers import CONFIG_MAPPING

    source = CONFIG_MAPPING["mistral_large4"]().text_config
    assert source.kv_source_layers == list(range(72))  # every layer its own: one block type
    text = _shrunk("mistral_large4").text_config
    assert text.num_hidden_layers < 8
    assert text.kv_source_layers == list(range(text.num_hidden_layers))
    # a layer reusing layer 0's cache keeps layer 0, and points at its new index
    from tinykit.model.layers import plan_layers
    from tinykit.model.recipes import recipe_for

    node = {"num_hidden_layers": 6, "kv_source_layers": [0, 1, 2, 3, 3, 5]}
    plan = plan_layers(node, "num_hidden_layers", recipe_for("").layer_fields, "auto", "x")
    assert plan.kept == (0, 3, 4) and plan.fields["kv_source_layers"] == [0, 1, 1]


def test_tower_layer_indexes_in_sub_configs_and_the_tower_itself_fit_its_depth():
    molmo = _shrunk("molmo2")  # the adapter reads layers [24, 18] of a 25-layer tower
    depth = molmo.vision_config.num_hidden_layers
    assert all(-depth <= i < depth for i in molmo.adapter_config.vision_feature_layer)
    vision = _shrunk("mllama").vision_config  # its own [3, 7, 15, 23, 30]
    assert len(vision.intermediate_layers_indices) == 5
    assert all(0 <= i < vision.num_hidden_layers for i in vision.intermediate_layers_indices)


def test_an_image_text_default_without_an_image_token_gets_one_inside_the_vocab():
    from transformers import CONFIG_MAPPING

    assert CONFIG_MAPPING["minicpmv4_6"]().image_token_id is None
    config = _shrunk("minicpmv4_6")
    assert 0 <= config.image_token_id < config.text_config.vocab_size


def test_a_composite_without_a_tokenizer_entry_ships_its_text_towers():
    from tinykit.tokenizer.train import class_for_model_type

    assert class_for_model_type("vision-text-dual-encoder") == "BertTokenizer"  # BERT text tower
    assert class_for_model_type("sam3_lite_text")  # its own text encoder: the default class
    with pytest.raises(Exception, match="takes no text input"):
        class_for_model_type("resnet")


def test_a_composite_codec_codebook_holds_its_decoders_vocabulary():
    # MusicGen's decoder generates the codes its EnCodec decodes: a dotted [derive] key sets the
    # codec's codebook to the power of two at or above the decoder's tiny vocabulary
    from tinykit.model.config import shrink_config
    from tinykit.model.spec import ShrinkSpec

    config = shrink_config({"model_type": "musicgen"}, ShrinkSpec(), vocab=396).config
    assert config.decoder.vocab_size == 396
    assert config.audio_encoder.codebook_size == 512


def test_transducer_labels_avoid_blank_and_pad_and_follow_the_blank_start():
    import torch
    from transformers import ParakeetTDTConfig

    from tinykit.model.inputs.text import transducer_labels

    config = ParakeetTDTConfig(vocab_size=8, blank_token_id=7, pad_token_id=0)
    generator = torch.Generator().manual_seed(0)
    labels, decoder_ids = transducer_labels(config, 8, generator, batch=2, seq=16)
    assert labels.shape == (2, 8) and decoder_ids.shape == (2, 9)
    assert not torch.isin(labels, torch.tensor([0, 7])).any()
    assert (decoder_ids[:, 0] == 7).all() and torch.equal(decoder_ids[:, 1:], labels)


def test_derived_widths_and_tables_follow_the_shrunk_keys():
    # CLAP's audio Swin doubles its width at every stage and its last stage is hidden_size wide
    audio = _shrunk("clap").audio_config
    assert audio.patch_embeds_hidden_size * 2 ** (len(audio.depths) - 1) == audio.hidden_size
    # Depth Pro's patches are its encoders' images, tapped at layers they have
    pro = _shrunk("depth_pro")
    assert pro.patch_size == pro.patch_model_config.image_size == ShrinkSpec().image_size
    assert max(pro.intermediate_hook_ids) < pro.patch_model_config.num_hidden_layers
    assert max(pro.scaled_images_feature_dims + pro.intermediate_feature_dims) <= 32
    # Mllama's tile embedding is tiles x (patches + 1) x hidden wide: under the leak limit
    vision = _shrunk("mllama").vision_config
    patches = (vision.image_size // vision.patch_size) ** 2 + 1
    assert vision.max_num_tiles * patches * vision.hidden_size <= dim_limit(ShrinkSpec())
    # TVP's prompt pads a tiny frame, leaving a base as large as the frame less both prompts
    tvp = _shrunk("tvp")
    assert tvp.max_img_size - 2 * tvp.visual_prompt_size > 0 and tvp.num_frames <= 4
    # PP-DocLayoutV3's mask head reads its backbone's first stage; HGNetV2 stages 2 layers deep
    v3 = _shrunk("pp_doclayout_v3")
    assert v3.x4_feat_dim == v3.backbone_config.stage_out_channels[0]
    assert max(v3.backbone_config.stage_numb_of_layers) <= 2
    # PP-DocLayoutV2's reading-order boxes fill its tiny width, as LayoutLMv3's do
    order = _shrunk("pp_doclayout_v2").reading_order_config
    assert 4 * order.coordinate_size + 2 * order.shape_size == order.hidden_size


@pytest.mark.parametrize("model_type", ["clap", "depth_pro", "mllama"])
def test_types_that_leaked_size_pass_within_the_budget(model_type, coverage_classes):
    rows = list(sweep([model_type], coverage_classes))
    assert [(r.model_type, r.reason) for r in rows if not r.ok] == []
    assert all(0 < r.weight_bytes <= MULTIMODAL_BUDGET for r in rows)
