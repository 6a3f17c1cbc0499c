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
from typing import Any

from tinykit.model.inputs_audio import feature_inputs, latent_inputs, waveform_inputs
from tinykit.model.inputs_image import (
    GRID_INPUTS,
    flattened_patch_inputs,
    grid_inputs,
    image_inputs,
    image_side,
    side_token_inputs,
    square_patches,
    video_inputs,
)
from tinykit.model.processors import is_int

__all__ = ["media_inputs", "side_token_inputs"]


def media_inputs(model: Any, generator: Any, batch: int) -> tuple[dict[str, Any], str]:
    """The non-text inputs `model.forward` reads, and how they were made ('processor X' or 'random')."""
    params = set(inspect.signature(model.forward).parameters)
    main = model.main_input_name
    config = model.config
    if "past_values" in params:  # a time-series forecaster: a lagged history and a horizon
        return _series(config, params, generator, batch)
    required = {
        n for n, p in inspect.signature(model.forward).parameters.items() if p.default is p.empty
    }
    # a waveform beside token ids where the forward requires both (PE Audio's)
    if (
        main == "input_values"
        or ("input_values" in params and "input_ids" not in params)
        or ("input_values" in required)
    ):
        return waveform_inputs(model, config, params, generator, batch)
    if main == "input_features":
        return feature_inputs(model, config, params, generator, batch)
    if main == "flattened_patches":  # Pix2Struct's rows of (position, patch pixels)
        return flattened_patch_inputs(
            config, getattr(config, "vision_config", config), params, generator, batch
        )
    if main == "latents":  # a codec's decoder alone: continuous latent frames
        return latent_inputs(model, config, generator, batch)
    vision = getattr(config, "vision_config", None) or config
    grid = next((g for g in GRID_INPUTS if g in params), None)
    if grid is not None:  # a patch-merging tower alone (Qwen2-VL's): flattened patches + grid
        patches, how = grid_inputs(model, vision, params, grid, generator, batch)
        return square_patches(model, vision, patches), how
    if "pixel_values_videos" in params and "pixel_values" not in params:
        return video_inputs(config, vision, "pixel_values_videos", params, generator, batch)
    if "pixel_values" in params and is_int(getattr(vision, "num_frames", None)):
        return video_inputs(config, vision, "pixel_values", params, generator, batch)
    has_tower = getattr(config, "vision_config", None) is not None  # None: a text-only default
    if "pixel_values" in params and (
        main == "pixel_values" or image_side(vision) is not None or has_tower or _required(model)
    ):
        return image_inputs(model, config, vision, params, generator, batch)
    return {}, ""


def _required(model: Any) -> bool:
    """Pixels are the forward's first required argument (a tower alone without an image size,
    Gemma 4's, whose main input name is left at input_ids)."""
    param = inspect.signature(model.forward).parameters.get("pixel_values")
    return param is not None and param.default is inspect.Parameter.empty


def _series(config, params, generator, batch) -> tuple[dict[str, Any], str]:
    """A forecaster's history (context plus its largest lag), its observed mask, time features and
    static features, and the future window the decoder is trained on (TimeSeriesTransformer's)."""
    import torch

    def setting(name: str) -> int:
        value = getattr(config, name, 0)
        return value if is_int(value) else 0

    lags = getattr(config, "lags_sequence", None) or [0]
    past = setting("context_length") + max(lags)
    future = setting("prediction_length")
    variates = setting("input_size")
    per_step = (variates,) if variates > 1 else ()  # one variate: no trailing axis
    if setting("num_input_channels"):  # PatchTST's (batch, steps, channels), one channel too
        per_step = (setting("num_input_channels"),)
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
