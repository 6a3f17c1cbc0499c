"""Pixel inputs: images through the type's image processor at the tiny tower's geometry, the
patch layouts of towers without one, random pixels otherwise, and video frames.
"""

from __future__ import annotations

import inspect
from typing import Any

from tinykit._values import is_int
from tinykit.frontend.processors import processors
from tinykit.model.inputs.forward import Forward, keep_accepted, runs
from tinykit.model.inputs.patches import grid_patch_inputs, native_patch_inputs, packed_patch_inputs
from tinykit.model.inputs.placement import image_features_getter
from tinykit.model.inputs.text import side_token_inputs


def image_side(vision: Any) -> int | None:
    size = getattr(vision, "image_size", None)
    if isinstance(size, list | tuple) and size and is_int(size[0]):
        return size[0]
    return size if is_int(size) else None


def reads_images(f: Forward) -> bool:
    """Pixels the forward reads as images: its main input, a tower of a known image side, an
    image-text model's tower, or its first required argument (a tower alone without an image
    size, Gemma 4's, whose main input name is left at input_ids)."""
    pixels = f.params.get("pixel_values")
    if pixels is None:
        return False
    has_tower = getattr(f.config, "vision_config", None) is not None  # None: a text-only default
    return (
        f.main == "pixel_values"
        or image_side(f.vision) is not None
        or has_tower
        or pixels.default is inspect.Parameter.empty
    )


def reads_video(f: Forward) -> bool:
    """Frames: a video argument beside no pixels, or pixels of a tower that names its frames."""
    if "pixel_values" not in f.params:
        return "pixel_values_videos" in f.params
    return is_int(getattr(f.vision, "num_frames", None))


def video_inputs(f: Forward) -> dict[str, Any]:
    """Frames through the type's processor where one fits (VideoMAE's), else random."""
    import torch

    processed = video_processor(f)
    if processed:
        return processed[1]
    key = "pixel_values" if "pixel_values" in f.params else "pixel_values_videos"
    size = image_side(f.vision) or 32
    frames = getattr(f.vision, "num_frames", None) or 4
    channels = getattr(f.vision, "num_channels", 3) or 3
    shape = (f.batch, frames, channels, size, size)
    return {key: torch.randn(*shape, generator=f.generator)}


def video_processor(f: Forward) -> tuple[Any, dict[str, Any]] | None:
    """The type's processor of videos (transformers lists VideoMAE's among the image
    processors) at the first tiny geometry whose frames fit the tower: (batch, frames, channels,
    side, side), as many frames as the tower reads. None when none does."""
    import numpy as np
    import torch

    key = "pixel_values" if "pixel_values" in f.params else "pixel_values_videos"
    size = image_side(f.vision) or 32
    frames = getattr(f.vision, "num_frames", None) or 4
    rng = np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=f.generator)))
    videos = [
        [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(frames)]
        for _ in range(f.batch)
    ]
    for processor in processors("image", f.config.model_type, *_geometries(f, size)):
        try:
            pixels = processor(videos, return_tensors="pt")["pixel_values"]
        except Exception:  # this geometry (or a processor of single images) does not suit
            continue
        if tuple(pixels.shape[:2]) == (f.batch, frames) and pixels.shape[-1] == size:
            return processor, {key: pixels}
    return None


def image_inputs(f: Forward) -> dict[str, Any]:
    """Images through the type's processor; where none builds, the first of PATCH_LAYOUTS the
    model's image features read, else random pixels."""
    processed = _processed_images(f)
    if processed:
        return processed
    for _name, applies, make in PATCH_LAYOUTS:
        if applies(f):
            return make(f)
    return _random_pixels(f)


def _geometries(f: Forward, size: int) -> tuple[dict[str, Any], ...]:
    """The tiny tower's geometry in each way processors name it: a square side, a pixel budget
    (patch-merging towers), a patch as a side pair (Fuyu's), patch and merge sizes alone, a tile
    side, or a shortest edge."""
    vision, config = f.vision, f.config
    square = {"height": size, "width": size}
    patch: Any = getattr(vision, "patch_size", None)
    merge: Any = getattr(vision, "spatial_merge_size", None)
    patch = patch if is_int(patch) else None
    merge = merge if is_int(merge) else None
    step = (patch or 8) * (merge or 1)  # pixels per image token of patch-merging towers
    pixels_budget = {"shortest_edge": step * step, "longest_edge": 4 * step * step}
    # any-resolution tiles (LLaVA-NeXT), rescaled to the tiny image side by the config shrink
    tiles = {"image_grid_pinpoints": getattr(config, "image_grid_pinpoints", None)}
    # a second tower's own image side (DeepSeek-VL-Hybrid's high_res_vision_config: the
    # processor's high_res_size)
    for key in [k for k in vars(config) if k.endswith("_vision_config") and k != "vision_config"]:
        side = image_side(getattr(config, key))
        if side is not None:
            tiles[f"{key.removesuffix('_vision_config')}_size"] = {"height": side, "width": side}
    return (
        {"size": square, "crop_size": square, "patch_size": patch, "merge_size": merge, **tiles},
        {"size": pixels_budget, "patch_size": patch, "merge_size": merge, **tiles},
        {"size": square, "patch_size": patch and {"height": patch, "width": patch}},
        {"patch_size": patch, "merge_size": merge, **tiles},
        # processors that split images into tiles of a side of their own (Idefics3's)
        {"size": {"longest_edge": size}, "max_image_size": {"longest_edge": size}},
        # a shortest edge, then a centre crop (ConvNeXt's, which refuse a height and width)
        {"size": {"shortest_edge": size}, "crop_size": square},
    )


def _processed_images(f: Forward) -> dict[str, Any]:
    found = image_processor(f)
    return found[1] if found else {}


def image_processor(f: Forward) -> tuple[Any, dict[str, Any]] | None:
    """The type's image processor at the first tiny geometry whose pixels of random images fit
    the tower, and what it made of them; None when none does (or the tower does not read 3
    channels). The input maker feeds these pixels; make-tiny ships this processor."""
    import numpy as np
    import torch

    size = image_side(f.vision) or 32
    channels = getattr(f.vision, "num_channels", 3) or 3
    rng = np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=f.generator)))
    images = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(f.batch)]
    found = processors("image", f.config.model_type, *_geometries(f, size)) if channels == 3 else ()
    for processor in found:
        try:
            raw = processor(images=images, return_tensors="pt")
            out = keep_accepted({**raw, **_patchified(processor, raw)}, f.names)
        except Exception:  # this geometry does not suit the processor: try the next one
            continue
        pixels = out.get("pixel_values")
        # a tower alone fed by its parent's processor: several images per sample (Idefics3's
        # layout) only where the tower reads them (Granite Docling's tower reads one)
        stacked = pixels is not None and pixels.dim() == 5 and "input_ids" not in f.params
        if stacked and not runs(f.model, out):
            continue
        if pixels is not None and (pixels.dim() < 4 or pixels.shape[-1] == size):
            return processor, out
    return None


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


def _getter_reads(f: Forward) -> set[str]:
    """The forward's arguments and those of the model's own image-feature getter."""
    getter = image_features_getter(f.model)
    return f.names | (set(inspect.signature(getter).parameters) if callable(getter) else set())


PATCH_LAYOUTS = (
    ("packed patches", lambda f: "target_sizes" in _getter_reads(f), packed_patch_inputs),
    (
        "patch grid",
        lambda f: "image_grid_thw" in _getter_reads(f),
        lambda f: grid_patch_inputs(f, "image_grid_thw"),
    ),
    ("native patches", lambda f: "spatial_shapes" in _getter_reads(f), native_patch_inputs),
)
"""Patch layouts of image-text models (and towers alone) without a processor here, tried in
order: MiniCPM-V's packed strip, a patch-merging model's grid, native-resolution rows."""


def _random_pixels(f: Forward) -> dict[str, Any]:
    """(batch, channels, side, side) pixels, or (batch, images, ...) where the tower reads several
    images per sample and not one (Idefics3; ModernVBERT and UltraVBERT, whose processors need
    torchvision; IDEFICS's text-to-images attention mask)."""
    import torch

    channels = getattr(f.vision, "num_channels", 3) or 3
    size = image_side(f.vision)
    if size is None:
        size = _runnable_side(f, channels) if f.main == "pixel_values" else 32
    pixels = torch.randn(f.batch, channels, size, size, generator=f.generator)
    several = pixels[:, None]
    getter = image_features_getter(f.model)
    instruction = side_token_inputs(f, 8)  # InstructBLIP-Video's (drawn either way)
    sizes = _image_sizes(getter, pixels)
    if callable(getter):
        reads_several = not runs(getter, {"pixel_values": pixels, **instruction, **sizes}) and runs(
            getter, {"pixel_values": several, **instruction, **sizes}
        )
    else:
        reads_several = "image_attention_mask" in f.params
    return {"pixel_values": several if reads_several else pixels, **sizes}


def _image_sizes(getter: Any, pixels: Any) -> dict[str, Any]:
    """Each image's true (height, width), `image_sizes`, where the image-feature getter requires
    it (Apertus 1.5 crops every image to it; its processor needs torchvision): the whole image."""
    import torch

    if not callable(getter):
        return {}
    param = inspect.signature(getter).parameters.get("image_sizes")
    if param is None or param.default is not param.empty:
        return {}
    return {"image_sizes": torch.tensor([list(pixels.shape[-2:])] * pixels.shape[0])}


RANDOM_SIDES = (32, 64, 128)
"""Image sides tried, smallest first, for a tower whose config names none."""


def _runnable_side(f: Forward, channels: int) -> int:
    """The smallest side of RANDOM_SIDES the tower runs on: a config without an image side
    (text recognisers, whose processors make 48 x 320 images) may downsample 32 pixels away."""
    import torch

    for side in RANDOM_SIDES:
        if runs(f.model, {"pixel_values": torch.zeros(f.batch, channels, side, side)}):
            return side
    return RANDOM_SIDES[0]
