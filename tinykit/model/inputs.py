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
    if main == "latents":  # a codec's decoder alone (Mimi's): continuous latents to decode
        return _latents(config, generator, batch)
    if "past_values" in params:  # a time-series forecaster: a lagged history and a horizon
        return _series(config, params, generator, batch)
    if main == "input_values" or ("input_values" in params and "input_ids" not in params):
        return _waveform(model, config, params, generator, batch)
    if main == "input_features":
        return _features(config, params, generator, batch)
    vision = getattr(config, "vision_config", None) or config
    if "grid_thw" in params:  # a patch-merging tower alone (Qwen2-VL's): flattened patches + grid
        return _patch_grid(vision, params, generator, batch)
    if "pixel_values_videos" in params and "pixel_values" not in params:
        return _video(config, vision, "pixel_values_videos", params, generator, batch)
    if "pixel_values" in params and _is_int(getattr(vision, "num_frames", None)):
        return _video(config, vision, "pixel_values", params, generator, batch)
    has_tower = getattr(config, "vision_config", None) is not None  # None: a text-only default
    if "pixel_values" in params and (
        main == "pixel_values" or _size(vision) is not None or has_tower
    ):
        return _image(config, vision, params, generator, batch)
    return {}, ""


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


def _processors(table_name: str, model_type: str, *geometries: dict[str, Any]) -> Iterator[Any]:
    """The type's processor from transformers' auto table, built for each tiny geometry in turn
    (processors name sizes differently: height/width, a pixel budget, patch and merge sizes)."""
    import importlib

    import transformers

    # only the table asked for: the video table's module needs torchvision, absent on CPU installs
    module, attribute = {
        "image": ("image_processing_auto", "IMAGE_PROCESSOR_MAPPING_NAMES"),
        "video": ("video_processing_auto", "VIDEO_PROCESSOR_MAPPING_NAMES"),
        "audio": ("feature_extraction_auto", "FEATURE_EXTRACTOR_MAPPING_NAMES"),
    }[table_name]
    table = getattr(importlib.import_module(f"transformers.models.auto.{module}"), attribute)
    names = table.get(model_type)  # type: ignore[attr-defined]  # an OrderedDict of names
    if isinstance(names, dict):
        names = [names.get("torchvision"), names.get("pil")]
    classes = [
        getattr(transformers, n, None)
        for n in (names if isinstance(names, list | tuple) else [names])
        if n
    ]
    for cls in [c for c in classes if c is not None][:1]:
        for geometry in [*geometries, {}]:
            try:
                yield cls(**{k: v for k, v in geometry.items() if v is not None})
            except Exception:  # a processor that rejects a tiny setting: try the next one
                continue


def _keep(out: Any, params: set[str]) -> dict[str, Any]:
    return {k: v for k, v in out.items() if k in params and k != "input_ids"}


def _image(config, vision, params, generator, batch) -> tuple[dict[str, Any], str]:
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
    geometries = (
        {"size": square, "crop_size": square, "patch_size": patch, "merge_size": merge},
        {"size": pixels_budget, "patch_size": patch, "merge_size": merge},
        {"patch_size": patch, "merge_size": merge},
    )
    inputs: dict[str, Any] = {}
    how = "random"
    rng = np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=generator)))
    images = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(batch)]
    for processor in _processors("image", config.model_type, *geometries) if channels == 3 else ():
        try:
            out = _keep(processor(images=images, return_tensors="pt"), params)
        except Exception:  # this geometry does not suit the processor: try the next one
            continue
        pixels = out.get("pixel_values")
        if pixels is not None and (pixels.dim() < 4 or pixels.shape[-1] == size):
            inputs, how = out, f"processor {type(processor).__name__}"
            break
    if not inputs:
        inputs["pixel_values"] = torch.randn(batch, channels, size, size, generator=generator)
    return inputs, how


def _patch_grid(vision, params, generator, batch) -> tuple[dict[str, Any], str]:
    """What the processors of patch-merging towers emit: every image's patches flattened to rows
    of channels x temporal patch x patch x patch values, and each image's (t, h, w) patch grid,
    h and w two merge windows wide."""
    import torch

    def setting(*names: str, default: int) -> int:
        values: list[Any] = [getattr(vision, n, None) for n in names]
        return next((int(v) for v in values if _is_int(v)), default)

    channels = setting("in_channels", "num_channels", "in_chans", default=3)
    patch = setting("patch_size", default=8)
    temporal = setting("temporal_patch_size", default=1)
    side = 2 * setting("spatial_merge_size", default=1)
    rows = batch * side * side
    key = "hidden_states" if "hidden_states" in params else "pixel_values"
    patches = torch.randn(rows, channels * temporal * patch * patch, generator=generator)
    grid = torch.tensor([[1, side, side]] * batch)
    return {key: patches, "grid_thw": grid}, "random"


def _video(config, vision, key, params, generator, batch) -> tuple[dict[str, Any], str]:
    import torch

    size = _size(vision) or 32
    frames = getattr(vision, "num_frames", None) or 4
    channels = getattr(vision, "num_channels", 3) or 3
    return {key: torch.randn(batch, frames, channels, size, size, generator=generator)}, "random"


def _latents(config, generator, batch) -> tuple[dict[str, Any], str]:
    """(batch, latent width, frames): the latent width is `latent_dim` where the codec compresses
    below its hidden size (Pocket-TTS's), else the hidden size."""
    import torch

    width = next(
        v for v in (getattr(config, "latent_dim", None), config.hidden_size) if _is_int(v)
    )
    return {"latents": torch.randn(batch, width, LATENT_FRAMES, generator=generator)}, "random"


LATENT_FRAMES = 8
"""Frames of latents given to a codec's decoder: each upsamples to hundreds of samples."""


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
    """A second of audio through the type's extractor, set to the tiny config's spectrogram
    geometry where it computes one (AST's frames x mel bins); else the raw waveform, with a
    channel axis where the model reads one."""
    import torch

    audio = torch.randn(batch, SAMPLES, generator=generator)
    geometry = {k: getattr(config, k, None) for k in SPECTROGRAM if "num_mel_bins" in vars(config)}
    for processor in _processors("audio", config.model_type, geometry):
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
    channels = getattr(config, "audio_channels", None)
    if _is_int(channels):  # a codec (EnCodec, Mimi) reads (batch, channels, samples)
        return {"input_values": audio[:, None].expand(-1, channels, -1).contiguous()}, "random"
    if not _runs_on(model, {"input_values": audio}):  # OmniASR's tower reads (batch, 1, samples)
        return {"input_values": audio[:, None]}, "random"
    return {"input_values": audio}, "random"


SPECTROGRAM = ("num_mel_bins", "max_length")
"""Config keys of a spectrogram front end that the extractor must match (frames x mel bins)."""


def _runs_on(model: Any, inputs: dict[str, Any]) -> bool:
    """Whether a no-grad forward on `inputs` succeeds: where nothing in the config says which
    layout the model reads, the first that runs is the one it reads."""
    import torch

    try:
        with torch.no_grad():
            model(**inputs)
    except Exception:  # the model rejects this layout: the caller tries the next one
        return False
    return True


def _features(config, params, generator, batch) -> tuple[dict[str, Any], str]:
    """Log-mel features: Whisper-style encoders need exactly 2 x max_source_positions frames."""
    import torch

    bins = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", None) or 80
    frames = 2 * getattr(config, "max_source_positions", 8)
    for processor in _processors("audio", config.model_type, {"feature_size": bins}):
        hop = getattr(processor, "hop_length", 160)
        audio = torch.randn(batch, frames * hop, generator=generator)
        try:
            out = processor(
                [a.numpy() for a in audio],
                sampling_rate=getattr(processor, "sampling_rate", SAMPLES),
                return_tensors="pt",
            )
            features = out["input_features"]
            if features.dim() == 3 and features.shape[1] == bins:
                fitted = torch.zeros(batch, bins, frames)
                take = min(frames, features.shape[-1])
                fitted[..., :take] = features[..., :take]
                return {"input_features": fitted}, f"processor {type(processor).__name__}"
        except Exception:  # the extractor wants other settings: random features instead
            pass
    return {"input_features": torch.randn(batch, bins, frames, generator=generator)}, "random"


def image_token_ids(model: Any, pixels: dict[str, Any], text: Any) -> Any:
    """`text` (batch, seq) with as many image tokens in front as the vision tower yields features."""
    import torch

    token = image_token(model.config)
    getter = getattr(model, "get_image_features", None)
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
