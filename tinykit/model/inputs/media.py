"""Inputs of a model's non-text towers: the first row of MODALITIES that applies to the forward
makes them (pixels, video frames, audio, time series), through the type's own processor where
transformers has one, shrunk to the tiny tower's geometry.

A processor made for the full-size model (224-pixel images, 30-second mel windows) does not fit a
tiny one, so its size settings are replaced by the tiny config's (image size, patch and merge
sizes, mel bins, frames). Where transformers has no processor for the type, or the processor does
not accept the tiny geometry, random tensors of the shape the config names are used instead.

A new modality is one module and one row here. Rows are tried in order, the more specific
first: a waveform with features before a waveform alone, a patch grid or video frames before
plain pixels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tinykit.model.inputs.audio import (
    feature_inputs,
    latent_inputs,
    reads_waveform,
    waveform_and_features,
    waveform_inputs,
)
from tinykit.model.inputs.forward import Forward
from tinykit.model.inputs.image import image_inputs, reads_images, reads_video, video_inputs
from tinykit.model.inputs.patches import flattened_patch_inputs, grid_key, grid_patch_inputs
from tinykit.model.inputs.series import reads_series, series_inputs

Modality = tuple[str, Callable[[Forward], bool], Callable[[Forward], dict[str, Any]]]

MODALITIES: tuple[Modality, ...] = (
    ("time series", reads_series, series_inputs),
    # a codec with a semantic encoder (X-Codec 2) requires features beside the waveform
    (
        "waveform and features",
        lambda f: reads_waveform(f) and "input_features" in f.required,
        waveform_and_features,
    ),
    ("waveform", reads_waveform, waveform_inputs),
    ("log-mel features", lambda f: f.main == "input_features", feature_inputs),
    ("flattened patches", lambda f: f.main == "flattened_patches", flattened_patch_inputs),
    ("latent frames", lambda f: f.main == "latents", latent_inputs),
    # a patch-merging tower alone (Qwen2-VL's): flattened patches + grid
    ("patch grid", lambda f: grid_key(f) is not None, grid_patch_inputs),
    ("video", reads_video, video_inputs),
    ("image", reads_images, image_inputs),
)
"""(name, applies(forward), make(forward) -> inputs), tried in order; none: text alone."""


def media_inputs(f: Forward) -> dict[str, Any]:
    """The non-text inputs the forward reads, made by the first row of MODALITIES that applies."""
    for _name, applies, make in MODALITIES:
        if applies(f):
            return make(f)
    return {}
