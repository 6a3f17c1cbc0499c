"""Inputs of a model's non-text towers: pixels, video frames, audio, built through the type's own
processor where transformers has one, shrunk to the tiny tower's geometry.

A processor made for the full-size model (224-pixel images, 30-second mel windows) does not fit a
tiny one, so its size settings are replaced by the tiny config's (image size, patch and merge
sizes, mel bins, frames). Where transformers has no processor for the type, or the processor does
not accept the tiny geometry, random tensors of the shape the config names are used instead.
Image-text models get as many image tokens in `input_ids` as their vision tower yields features.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

SAMPLES = 16_000
"""Audio length of a waveform input: one second at 16 kHz, longer than any conv front end's field."""


def media_inputs(model: Any, generator: Any, batch: int) -> tuple[dict[str, Any], str]:
    """The non-text inputs `model.forward` reads, and how they were made ('processor X' or 'random')."""
    params = set(inspect.signature(model.forward).parameters)
    main = model.main_input_name
    config = model.config
    if "past_values" in params:  # a time-series forecaster: a lagged history and a horizon
        return _series(config, params, generator, batch)
    if main == "input_values" or ("input_values" in params and "input_ids" not in params):
        return _waveform(model, config, params, generator, batch)
    if main == "input_features":
        return _features(model, config, params, generator, batch)
    if main == "latents":  # a codec's decoder alone: continuous latent frames
        return _latents(model, config, generator, batch)
    vision = getattr(config, "vision_config", None) or config
    grid = next((g for g in GRID_INPUTS if g in params), None)
    if grid is not None:  # a patch-merging tower alone (Qwen2-VL's): flattened patches + grid
        return _patch_grid(vision, params, grid, generator, batch)
    if "pixel_values_videos" in params and "pixel_values" not in params:
        return _video(config, vision, "pixel_values_videos", params, generator, batch)
    if "pixel_values" in params and _is_int(getattr(vision, "num_frames", None)):
        return _video(config, vision, "pixel_values", params, generator, batch)
    has_tower = getattr(config, "vision_config", None) is not None  # None: a text-only default
    if "pixel_values" in params and (
        main == "pixel_values" or _size(vision) is not None or has_tower
    ):
        return _image(model, config, vision, params, generator, batch)
    return {}, ""


GRID_INPUTS = ("grid_thw", "image_grid_thw")
"""Forward arguments naming each image's (t, h, w) patch grid, beside its flattened patches."""


def image_features_getter(model: Any) -> Any:
    """`get_image_features` of the model, or of its base model where a head class leaves it
    there (FuyuForCausalLM's); None when neither has one."""
    return getattr(model, "get_image_features", None) or getattr(
        getattr(model, "base_model", None), "get_image_features", None
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _size(vision: Any) -> int | None:
    size = getattr(vision, "image_size", None)
    if isinstance(size, list | tuple) and size and _is_int(size[0]):
        return size[0]
    return size if _is_int(size) else None


def image_token(config: Any) -> int | None:
    for key in ("image_token_id", "image_token_index"):
        value = getattr(config, key, None)
        if _is_int(value):
            return value
    return None


def _processors(
    table_name: str, model_type: str, *geometries: dict[str, Any], config: Any = None
) -> Iterator[Any]:
    """The type's processor from transformers' auto table, built for each tiny geometry in turn
    (processors name sizes differently: height/width, a pixel budget, patch and merge sizes).
    Settings the processor and `config` name alike (an audio tower's `max_length` frames,
    `num_mel_bins`) take the tiny config's value first."""
    import importlib

    import transformers

    # only the table asked for: the video table's module needs torchvision, even to be read
    module, attr = {
        "image": ("image_processing_auto", "IMAGE_PROCESSOR_MAPPING_NAMES"),
        "video": ("video_processing_auto", "VIDEO_PROCESSOR_MAPPING_NAMES"),
        "audio": ("feature_extraction_auto", "FEATURE_EXTRACTOR_MAPPING_NAMES"),
    }[table_name]
    try:
        table = getattr(importlib.import_module(f"transformers.models.auto.{module}"), attr)
    except ImportError:  # a backend the table needs is missing: no processor, random inputs
        return
    names = table.get(model_type) or table.get(_sibling(model_type, table))
    if isinstance(names, dict):
        names = [names.get("torchvision"), names.get("pil")]
    classes = [
        getattr(transformers, n, None)
        for n in (names if isinstance(names, list | tuple) else [names])
        if n
    ]
    for cls in [c for c in classes if c is not None]:
        built = False
        named = _named_like(cls, config) if config is not None else {}
        for geometry in [*([named] if named else []), *geometries, {}]:
            try:
                processor = cls(**{k: v for k, v in geometry.items() if v is not None})
            except Exception:  # a processor that rejects a tiny setting: try the next one
                continue
            built = True
            yield processor
        if built:  # the first backend that builds (torchvision's, else PIL's) is the type's
            return


def _named_like(cls: Any, config: Any) -> dict[str, int]:
    """The processor's integer settings that `config` also names, at the config's value."""
    try:
        accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}
    except (TypeError, ValueError):  # a processor without an inspectable constructor
        return {}
    return {k: getattr(config, k) for k in sorted(accepted) if _is_int(getattr(config, k, None))}


def _sibling(model_type: str, table: Any) -> str | None:
    """A type sharing `model_type`'s multimodal processor class that the table lists (GLM-4V-MoE
    uses GLM-4V's processor, and so its image processor)."""
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    mine = PROCESSOR_MAPPING_NAMES.get(model_type)
    return next(
        (t for t, name in PROCESSOR_MAPPING_NAMES.items() if mine and name == mine and t in table),
        None,
    )


def _keep(out: Any, params: set[str]) -> dict[str, Any]:
    return {k: v for k, v in out.items() if k in params and k != "input_ids"}


def _image(model, config, vision, params, generator, batch) -> tuple[dict[str, Any], str]:
    import numpy as np
    import torch

    size = _size(vision) or 32
    channels = getattr(vision, "num_channels", 3) or 3
    square = {"height": size, "width": size}
    patch = getattr(vision, "patch_size", None)
    merge = getattr(vision, "spatial_merge_size", None)
    patch = patch if _is_int(patch) else None
    merge = merge if _is_int(merge) else None
    step = (patch or 8) * (merge or 1)  # pixels per image token of patch-merging towers
    pixels_budget = {"shortest_edge": step * step, "longest_edge": 4 * step * step}
    # any-resolution tiles (LLaVA-NeXT), rescaled to the tiny image side by the config shrink
    tiles = {"image_grid_pinpoints": getattr(config, "image_grid_pinpoints", None)}
    geometries = (
        {"size": square, "crop_size": square, "patch_size": patch, "merge_size": merge, **tiles},
        {"size": pixels_budget, "patch_size": patch, "merge_size": merge, **tiles},
        # Fuyu's names the patch as a side pair
        {"size": square, "patch_size": patch and {"height": patch, "width": patch}},
        {"patch_size": patch, "merge_size": merge, **tiles},
    )
    inputs: dict[str, Any] = {}
    how = "random"
    rng = np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=generator)))
    images = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(batch)]
    for processor in _processors("image", config.model_type, *geometries) if channels == 3 else ():
        try:
            raw = processor(images=images, return_tensors="pt")
            out = _keep({**raw, **_patchified(processor, raw)}, params)
        except Exception:  # this geometry does not suit the processor: try the next one
            continue
        pixels = out.get("pixel_values")
        if pixels is not None and (pixels.dim() < 4 or pixels.shape[-1] == size):
            inputs, how = out, f"processor {type(processor).__name__}"
            break
    getter = image_features_getter(model)
    reads = params | (set(inspect.signature(getter).parameters) if callable(getter) else set())
    if not inputs and "image_grid_thw" in reads:  # a patch-merging model without a processor
        return _patch_grid(vision, params, "image_grid_thw", generator, batch)
    if not inputs:
        pixels = torch.randn(batch, channels, size, size, generator=generator)
        # (batch, images, channels, h, w) where the tower reads several images per sample and
        # not one (Idefics3; ModernVBERT and UltraVBERT, whose processors need torchvision)
        several = pixels[:, None]
        if (
            callable(getter)
            and not _runs(getter, {"pixel_values": pixels})
            and _runs(getter, {"pixel_values": several})
        ):
            pixels = several
        inputs["pixel_values"] = pixels
    return inputs, how


def _patchified(processor: Any, raw: Any) -> dict[str, Any]:
    """Pixels of a processor that leaves patching to its model's processor (Fuyu's returns
    resized `images` and a `patchify_image` step): every sample's patches as rows of
    channels x patch x patch values, which such a model's linear patch embedding reads."""
    import torch

    if "pixel_values" in raw or "images" not in raw or not hasattr(processor, "patchify_image"):
        return {}
    rows = [
        torch.as_tensor(
            processor.patchify_image(image=sample.reshape(-1, *sample.shape[-3:]).numpy())
        )
        for sample in raw["images"]
    ]
    return {"pixel_values": torch.stack([r.reshape(-1, r.shape[-1]) for r in rows])}


def _patch_grid(vision, params, grid_key, generator, batch) -> tuple[dict[str, Any], str]:
    """What the processors of patch-merging towers emit: every image's patches flattened to rows
    of channels x temporal patch x patch x patch values, and each image's (t, h, w) patch grid,
    h and w two merge windows wide."""
    import torch

    def setting(*names: str, default: int) -> int:
        values: list[Any] = [getattr(vision, n, None) for n in names]
        return next((int(v) for v in values if _is_int(v)), default)

    channels = setting("in_channels", "num_channels", "in_chans", default=3)
    patch = setting("patch_size", default=8)
    temporal = setting("temporal_patch_size", "patch_temporal", default=1)
    side = 2 * setting("spatial_merge_size", "merge_size", default=1)
    rows = batch * side * side
    key = "hidden_states" if "hidden_states" in params else "pixel_values"
    patches = torch.randn(rows, channels * temporal * patch * patch, generator=generator)
    grid = torch.tensor([[1, side, side]] * batch)
    return {key: patches, grid_key: grid}, "random"


def _video(config, vision, key, params, generator, batch) -> tuple[dict[str, Any], str]:
    import torch

    size = _size(vision) or 32
    frames = getattr(vision, "num_frames", None) or 4
    channels = getattr(vision, "num_channels", 3) or 3
    return {key: torch.randn(batch, frames, channels, size, size, generator=generator)}, "random"


def _series(config, params, generator, batch) -> tuple[dict[str, Any], str]:
    """A forecaster's history (context plus its largest lag), its observed mask, time features and
    static features, and the future window the decoder is trained on (TimeSeriesTransformer's)."""
    import torch

    def setting(name: str) -> int:
        value = getattr(config, name, 0)
        return value if _is_int(value) else 0

    lags = getattr(config, "lags_sequence", None) or [0]
    past = setting("context_length") + max(lags)
    future = setting("prediction_length")
    variates = setting("input_size")
    per_step = (variates,) if variates > 1 else ()  # one variate: no trailing axis
    times = setting("num_time_features")
    inputs = {
        "past_values": torch.randn(batch, past, *per_step, generator=generator),
        "past_observed_mask": torch.ones(batch, past, *per_step),
        "past_time_features": torch.randn(batch, past, times, generator=generator),
        "future_values": torch.randn(batch, future, *per_step, generator=generator),
        "future_time_features": torch.randn(batch, future, times, generator=generator),
    }
    if setting("num_static_categorical_features"):
        cardinality = min(getattr(config, "cardinality", None) or [1])
        shape = (batch, setting("num_static_categorical_features"))
        inputs["static_categorical_features"] = torch.randint(0, max(1, cardinality), shape)
    if setting("num_static_real_features"):
        shape = (batch, setting("num_static_real_features"))
        inputs["static_real_features"] = torch.randn(*shape, generator=generator)
    return {k: v for k, v in inputs.items() if k in params}, "random"


def _waveform(model, config, params, generator, batch) -> tuple[dict[str, Any], str]:
    import torch

    audio = torch.randn(batch, SAMPLES, generator=generator)
    for processor in _processors("audio", config.model_type, config=config):
        try:
            out = processor(
                [a.numpy() for a in audio],
                sampling_rate=getattr(processor, "sampling_rate", SAMPLES),
                return_tensors="pt",
            )
            inputs = _keep(out, params)
            if "input_values" in inputs:
                return inputs, f"processor {type(processor).__name__}"
        except Exception:  # the extractor wants another layout: the raw waveform instead
            pass
    # no extractor: (batch, samples) as wav2vec2 reads it, or (batch, channels, samples) as codecs
    channels: Any = getattr(config, "audio_channels", None)
    layouts = [audio, audio[:, None].expand(batch, channels if _is_int(channels) else 1, SAMPLES)]
    for waveform in layouts if "input_values" in params else layouts[:1]:
        if _runs(model, {"input_values": waveform.contiguous()}):
            return {"input_values": waveform.contiguous()}, "random"
    return {"input_values": audio}, "random"


LATENT_WIDTHS = ("hidden_size", "latent_dim", "codebook_dim")
"""Config keys that may name the channels of a codec decoder's latent frames."""


def _latents(model, config, generator, batch) -> tuple[dict[str, Any], str]:
    """Latent frames (batch, channels, 8) in the first width of LATENT_WIDTHS the decoder reads."""
    import torch

    widths = [getattr(config, k) for k in LATENT_WIDTHS if _is_int(getattr(config, k, None))]
    candidates = [torch.randn(batch, w, 8, generator=generator) for w in dict.fromkeys(widths)]
    runs = (c for c in candidates if _runs(model, {"latents": c}))
    latents = next(runs, candidates[0] if candidates else torch.randn(batch, 32, 8))
    return {"latents": latents}, "random"


FEATURE_BINS = (
    "input_size",
    "num_mel_bins",
    "feature_size",
    "input_feat_per_channel",
    "feature_projection_input_dim",
)
"""Config keys naming the feature width of a log-mel front end: stacked frames (FunASR's
`input_size`, mel bins x frames per step) before plain mel bins."""
FRAMES = 64
"""Mel frames (0.64 s) for an encoder without a fixed window: past any subsampling stack's field."""


def _audio_node(config: Any) -> Any:
    """The config, or the sub-config of its audio tower (`encoder_config`, `audio_config`), that
    names the feature width."""
    from transformers import PretrainedConfig

    nodes = [config, *(v for v in vars(config).values() if isinstance(v, PretrainedConfig))]
    named = (n for n in nodes if any(_is_int(getattr(n, k, None)) for k in FEATURE_BINS))
    return next(named, config)


def _features(model, config, params, generator, batch) -> tuple[dict[str, Any], str]:
    """Log-mel features in the layout the model reads: (batch, bins, frames) as Whisper's, or
    (batch, frames, bins) as Parakeet's; Whisper-style encoders need exactly 2 x
    max_source_positions frames."""
    import torch

    node = _audio_node(config)
    bins = next((getattr(node, k) for k in FEATURE_BINS if _is_int(getattr(node, k, None))), 80)
    positions: Any = getattr(node, "max_source_positions", None)
    frames = 2 * positions if _is_int(positions) else FRAMES
    window: Any = getattr(node, "n_window", None)  # chunked attention: whole chunks of 2 x n_window
    if not _is_int(positions) and _is_int(window) and window > 0:
        frames = -(-frames // (2 * window)) * 2 * window
    for processor in _processors("audio", config.model_type, {"feature_size": bins}, config=node):
        hop = getattr(processor, "hop_length", 160)
        audio = torch.randn(batch, frames * hop, generator=generator)
        try:
            out = processor(
                [a.numpy() for a in audio],
                sampling_rate=getattr(processor, "sampling_rate", SAMPLES),
                return_tensors="pt",
            )
            features = out["input_features"]
        except Exception:  # the extractor wants other settings: random features instead
            continue
        if features.dim() == 3 and bins in features.shape[1:]:  # the extractor's own layout
            time_axis = 2 if features.shape[1] == bins else 1
            fitted = torch.zeros(
                *[frames if i == time_axis else n for i, n in enumerate(features.shape)]
            )
            take = min(frames, features.shape[time_axis])
            fitted.narrow(time_axis, 0, take).copy_(features.narrow(time_axis, 0, take))
            how = f"processor {type(processor).__name__}"
            mask = _feature_mask(params, batch, frames)
            if "attention_mask" in out and "attention_mask" in params:  # every frame is real
                mask["attention_mask"] = torch.ones(batch, frames, dtype=torch.long)
            return {"input_features": fitted, **mask}, how
    # no extractor: whichever layout the model's forward accepts
    channels_first = torch.randn(batch, bins, frames, generator=generator)
    mask = _feature_mask(params, batch, frames)
    for features in (channels_first, channels_first.transpose(1, 2).contiguous()):
        if _runs(model, {"input_features": features, **mask}):
            return {"input_features": features, **mask}, "random"
    return {"input_features": channels_first, **mask}, "random"


def _feature_mask(params: set[str], batch: int, frames: int) -> dict[str, Any]:
    """Encoders whose forward requires a frame mask beside the features (Qwen3-ASR's) get one
    that keeps every frame."""
    import torch

    key = "input_features_mask"
    return {key: torch.ones(batch, frames, dtype=torch.long)} if key in params else {}


def _runs(model: Any, inputs: dict[str, Any]) -> bool:
    import torch

    try:
        with torch.no_grad():
            model(**inputs)
    except Exception:  # this layout does not suit the model: the caller tries the next
        return False
    return True


def image_token_ids(model: Any, pixels: dict[str, Any], text: Any) -> Any:
    """`text` (batch, seq) with as many image tokens in front as the vision tower yields features."""
    import torch

    token = image_token(model.config)
    getter = image_features_getter(model)
    if token is None or getter is None:
        return text
    accepted = set(inspect.signature(getter).parameters)
    with torch.no_grad():
        features = getter(**{k: v for k, v in pixels.items() if k in accepted})
    if not isinstance(features, torch.Tensor | list | tuple):  # a ModelOutput
        pooled = getattr(features, "pooler_output", None)
        features = pooled if pooled is not None else features.last_hidden_state
    if isinstance(features, torch.Tensor):
        count = features.shape[:-1].numel()
    else:
        count = sum(f.shape[:-1].numel() for f in features)
    per_sample = count // text.shape[0]
    text = text.masked_fill(text == token, 0)  # random text must not hold image tokens itself
    images = torch.full((text.shape[0], per_sample), token, dtype=text.dtype)
    return torch.cat([images, text], dim=1)
