"""Pixel inputs: images through the type's image processor at the tiny tower's geometry,
flattened patch grids of patch-merging towers, video frames, and the image tokens an image-text
model's `input_ids` need.
"""

from __future__ import annotations

import inspect
from typing import Any

from tinykit.model.processors import is_int, keep_accepted, processors, runs

GRID_INPUTS = ("grid_thw", "image_grid_thw", "image_grid_hw")
"""Forward arguments naming each image's (t, h, w) patch grid, beside its flattened patches
(`_hw`: the (h, w) grid alone, Nemotron-H Omni's)."""


def image_features_getter(model: Any) -> Any:
    """`get_image_features` of the model, or of its base model where a head class leaves it
    there (FuyuForCausalLM's); None when neither has one."""
    return getattr(model, "get_image_features", None) or getattr(
        getattr(model, "base_model", None), "get_image_features", None
    )


def getter_params(model: Any) -> set[str]:
    """What the image-feature getter reads: a head's that passes **kwargs on reads its base
    model's too (VideoLLaMA 3's `image_merge_sizes`)."""
    found: set[str] = set()
    for owner in (model, getattr(model, "base_model", None)):
        getter = getattr(owner, "get_image_features", None)
        if callable(getter):
            found |= set(inspect.signature(getter).parameters)
    return found


def image_side(vision: Any) -> int | None:
    size = getattr(vision, "image_size", None)
    if isinstance(size, list | tuple) and size and is_int(size[0]):
        return size[0]
    return size if is_int(size) else None


def image_token(config: Any) -> int | None:
    for key in ("image_token_id", "image_token_index"):
        value = getattr(config, key, None)
        if is_int(value):
            return value
    return None


def image_inputs(model, config, vision, params, generator, batch) -> tuple[dict[str, Any], str]:
    import numpy as np
    import torch

    size = image_side(vision) or 32
    channels = getattr(vision, "num_channels", 3) or 3
    square = {"height": size, "width": size}
    patch = getattr(vision, "patch_size", None)
    merge = getattr(vision, "spatial_merge_size", None)
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
    for processor in processors("image", config.model_type, *geometries) if channels == 3 else ():
        try:
            raw = processor(images=images, return_tensors="pt")
            out = keep_accepted({**raw, **_patchified(processor, raw)}, params)
        except Exception:  # this geometry does not suit the processor: try the next one
            continue
        pixels = out.get("pixel_values")
        # a tower alone fed by its parent's processor: several images per sample (Idefics3's
        # layout) only where the tower reads them (Granite Docling's tower reads one)
        stacked = pixels is not None and pixels.dim() == 5 and "input_ids" not in params
        if stacked and not runs(model, out):
            continue
        if pixels is not None and (pixels.dim() < 4 or pixels.shape[-1] == size):
            inputs, how = out, f"processor {type(processor).__name__}"
            break
    getter = image_features_getter(model)
    reads = params | (set(inspect.signature(getter).parameters) if callable(getter) else set())
    if not inputs and "target_sizes" in getter_params(model):  # MiniCPM-V's packed patches
        return packed_patch_inputs(config, vision, generator, batch)
    if not inputs and "image_grid_thw" in reads:  # a patch-merging model without a processor
        patches, how = grid_inputs(model, vision, params, "image_grid_thw", generator, batch)
        return square_patches(model, vision, patches), how
    if not inputs and "spatial_shapes" in reads:  # native-resolution patches, no processor
        return native_patch_inputs(vision, generator, batch)
    if not inputs:
        if image_side(vision) is None and model.main_input_name == "pixel_values":
            size = _runnable_side(model, channels, batch)
        pixels = torch.randn(batch, channels, size, size, generator=generator)
        # (batch, images, channels, h, w) where the tower reads several images per sample and
        # not one (Idefics3; ModernVBERT and UltraVBERT, whose processors need torchvision)
        several = pixels[:, None]
        instruction = side_token_inputs(model, generator, batch, 8)  # InstructBLIP-Video's
        if (
            callable(getter)
            and not runs(getter, {"pixel_values": pixels, **instruction})
            and runs(getter, {"pixel_values": several, **instruction})
        ):
            pixels = several
        elif not callable(getter) and "image_attention_mask" in params:
            pixels = several  # a text-to-images attention mask (IDEFICS's): images per sample
        inputs["pixel_values"] = pixels
    return inputs, how


RANDOM_SIDES = (32, 64, 128)
"""Image sides tried, smallest first, for a tower whose config names none."""


def _runnable_side(model: Any, channels: int, batch: int) -> int:
    """The smallest side of RANDOM_SIDES the tower runs on: a config without an image side
    (text recognisers, whose processors make 48 x 320 images) may downsample 32 pixels away."""
    import torch

    for side in RANDOM_SIDES:
        if runs(model, {"pixel_values": torch.zeros(batch, channels, side, side)}):
            return side
    return RANDOM_SIDES[0]


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


def patch_grid_inputs(vision, params, grid_key, generator, batch) -> tuple[dict[str, Any], str]:
    """What the processors of patch-merging towers emit: every image's patches flattened to rows
    of channels x temporal patch x patch x patch values, and each image's (t, h, w) patch grid,
    h and w two merge windows wide."""
    import torch

    def setting(*names: str, default: int) -> int:
        values: list[Any] = [getattr(vision, n, None) for n in names]
        return next((int(v) for v in values if is_int(v)), default)

    channels = setting("in_channels", "num_channels", "in_chans", default=3)
    patch = setting("patch_size", default=8)
    temporal = setting("temporal_patch_size", "patch_temporal", default=1)
    side = 2 * setting("spatial_merge_size", "merge_size", default=1)
    rows = batch * side * side
    key = "hidden_states" if "hidden_states" in params else "pixel_values"
    patches = torch.randn(rows, channels * temporal * patch * patch, generator=generator)
    grid = torch.tensor(
        [[1, side, side][-2:] if grid_key.endswith("_hw") else [1, side, side]] * batch
    )
    out = {key: patches, grid_key: grid}
    for name in ("merge_sizes", "image_merge_sizes"):  # each image's merge window (VideoLLaMA 3's)
        if name in params:
            out[name] = torch.tensor([side // 2] * batch)
    return out, "random"


def flattened_patch_inputs(config, vision, params, generator, batch) -> tuple[dict[str, Any], str]:
    """Pix2Struct's variable-resolution input: up to 16 patches per image, each a row of its
    (row, column) position and its patch x patch pixels, as wide as the tower's patch embedding
    reads (`patch_embed_hidden_size`), through the type's image processor where it builds."""
    import numpy as np
    import torch

    width = getattr(vision, "patch_embed_hidden_size", None)
    width = width if is_int(width) else 3 * 16 * 16
    patch, rows = max(1, int((width // 3) ** 0.5)), 16
    rng = np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=generator)))
    images = [rng.integers(0, 256, (4 * patch, 4 * patch, 3), dtype=np.uint8) for _ in range(batch)]
    geometry = {"patch_size": {"height": patch, "width": patch}, "max_patches": rows}
    for processor in processors("image", config.model_type, geometry):
        try:
            out = keep_accepted(
                processor(images=images, return_tensors="pt", max_patches=rows), params
            )
        except Exception:  # this geometry does not suit the processor: random rows instead
            continue
        if (
            out.get("flattened_patches") is not None
            and out["flattened_patches"].shape[-1] == 2 + width
        ):
            return out, f"processor {type(processor).__name__}"
    side = int(rows**0.5)
    positions = torch.tensor([[r, c] for r in range(1, side + 1) for c in range(1, side + 1)])
    pixels = torch.randn(batch, rows, width, generator=generator)
    patches = torch.cat([positions.expand(batch, rows, 2).float(), pixels], dim=-1)
    return {"flattened_patches": patches, "attention_mask": torch.ones(batch, rows)}, "random"


def packed_patch_inputs(config, vision, generator, batch) -> tuple[dict[str, Any], str]:
    """What MiniCPM-V's processor emits: every image's patches side by side in one strip of
    patch-high pixels (batch of one), and each image's (h, w) patch grid in `target_sizes`,
    whole merge windows (merge_kernel_size, merged twice) wide."""
    import torch

    patch = getattr(vision, "patch_size", 8)
    kernel = getattr(config, "merge_kernel_size", None) or (2, 2)
    side = int(kernel[0]) ** 2
    channels = getattr(vision, "num_channels", 3) or 3
    width = batch * side * side * patch
    pixels = torch.randn(1, channels, patch, width, generator=generator)
    return {"pixel_values": pixels, "target_sizes": torch.tensor([[side, side]] * batch)}, "random"


def grid_inputs(model, vision, params, grid_key, generator, batch) -> tuple[dict[str, Any], str]:
    """Patch-grid inputs in the layout the model's image features read: what its forward and its
    `get_image_features` name (VideoLLaMA 3's merge sizes), patches unflattened where needed."""
    getter = image_features_getter(model)
    reads = getter_params(model)
    patches, how = patch_grid_inputs(vision, params | reads, grid_key, generator, batch)
    return _unflattened_if_needed(getter, vision, patches), how


def _unflattened_if_needed(getter: Any, vision: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """Patches as (rows, channels, patch, patch), or with a leading batch of one, where the tower
    reads them unflattened (PaddleOCR-VL's embeddings) and not as rows of values."""
    pixels = inputs.get("pixel_values")
    channels = getattr(vision, "num_channels", 3)
    if not callable(getter) or pixels is None or not is_int(channels) or runs(getter, inputs):
        return inputs
    patch = int((pixels.shape[-1] // channels) ** 0.5)
    if patch * patch * channels != pixels.shape[-1]:
        return inputs
    for lead in ((), (1,)):
        shape = (*lead, pixels.shape[0], channels, patch, patch)
        stacked = {**inputs, "pixel_values": pixels.reshape(shape)}
        if runs(getter, stacked):
            return stacked
    return inputs


def video_inputs(config, vision, key, params, generator, batch) -> tuple[dict[str, Any], str]:
    import torch

    size = image_side(vision) or 32
    frames = getattr(vision, "num_frames", None) or 4
    channels = getattr(vision, "num_channels", 3) or 3
    return {key: torch.randn(batch, frames, channels, size, size, generator=generator)}, "random"


def image_token_ids(model: Any, pixels: dict[str, Any], text: Any) -> Any:
    """`text` (batch, seq) with as many image tokens in front as the vision tower yields features."""
    import torch

    token = image_token(model.config)
    if token is None or image_features_getter(model) is None:
        return text
    per_sample = image_feature_count(model, pixels) // text.shape[0]
    text = text.masked_fill(text == token, 0)  # random text must not hold image tokens itself
    images = torch.full((text.shape[0], per_sample), token, dtype=text.dtype)
    return torch.cat([images, text], dim=1)


def image_feature_count(model: Any, pixels: dict[str, Any]) -> int:
    """How many feature vectors the vision side yields for `pixels`, over the whole batch."""
    import torch

    getter = image_features_getter(model)
    accepted = getter_params(model)
    with torch.no_grad():
        features = getter(**{k: v for k, v in pixels.items() if k in accepted})
    if not isinstance(features, torch.Tensor | list | tuple):  # a ModelOutput
        pooled = getattr(features, "pooler_output", None)
        features = pooled if pooled is not None else features.last_hidden_state
    if isinstance(features, torch.Tensor):
        return features.shape[:-1].numel()
    return sum(f.shape[:-1].numel() for f in features)


def image_position_inputs(model: Any, pixels: dict[str, Any], text: Any) -> tuple[Any, dict]:
    """Masks that place image features in the text where no image token id does: Kosmos-2's
    `image_embeds_position_mask` (one position per feature, in front of the text) and IDEFICS's
    `image_attention_mask` (which of a sample's images each text position attends to)."""
    import torch

    params = set(inspect.signature(model.forward).parameters)
    out: dict[str, Any] = {}
    batch = text.shape[0]
    if "image_embeds_position_mask" in params and image_features_getter(model) is not None:
        per_sample = image_feature_count(model, pixels) // batch
        text = torch.cat([torch.zeros(batch, per_sample, dtype=text.dtype), text], dim=1)
        mask = torch.zeros_like(text)
        mask[:, :per_sample] = 1
        out["image_embeds_position_mask"] = mask
    images = pixels.get("pixel_values")
    if "image_attention_mask" in params and images is not None and images.dim() == 5:
        out["image_attention_mask"] = torch.ones(batch, text.shape[1], images.shape[1]).long()
    return text, out


def native_patch_inputs(vision: Any, generator: Any, batch: int) -> tuple[dict[str, Any], str]:
    """What native-resolution (NaFlex) processors emit, Siglip2's and LFM2-VL's: each image's
    patches as rows of channels x patch x patch values padded to the tower's `num_patches`, the
    (h, w) patch grid of each image and a mask of the real rows. The grid is 4 x 4 patches (a
    whole number of 2 x 2 merge windows)."""
    import torch

    channels = getattr(vision, "num_channels", 3) or 3
    patch = getattr(vision, "patch_size", 16)
    rows = getattr(vision, "num_patches", 16)
    rows = rows if is_int(rows) and rows >= 16 else 16
    pixels = torch.randn(batch, rows, channels * patch * patch, generator=generator)
    mask = torch.zeros(batch, rows, dtype=torch.long)
    mask[:, :16] = 1
    shapes = torch.tensor([[4, 4]] * batch)
    return {
        "pixel_values": pixels,
        "spatial_shapes": shapes,
        "pixel_attention_mask": mask,
    }, "random"


def square_patches(model: Any, vision: Any, grid: dict[str, Any]) -> dict[str, Any]:
    """Flattened patch rows, or the first other layout of the same values that runs where they do
    not: for a tower whose patch embedding is a 2D convolution over each patch (Kimi-K2.5's),
    (patches, channels, patch, patch); for one that reads channels-last pixels and a grid of
    merged tokens (Inkling2's), one (merge, patch, merge, patch, channels) block per token and
    the grid divided by the merge size."""
    key = "pixel_values" if "pixel_values" in grid else "hidden_states"
    getter = image_features_getter(model) or model
    side = getattr(vision, "patch_size", None)
    rows = grid[key]
    if not is_int(side) or rows.dim() != 2 or rows.shape[-1] % (side * side) or runs(getter, grid):
        return grid
    candidates = [{**grid, key: rows.view(len(rows), -1, side, side)}]
    merge = getattr(vision, "spatial_merge_size", None)
    grid_key = next((k for k in GRID_INPUTS if k in grid), None)
    if is_int(merge) and grid_key is not None:
        merged = grid[grid_key] // torch_tensor([1, merge, merge])
        channels = rows.shape[-1] // (side * side)
        pixels = rows.reshape(-1, merge, side, merge, side, channels)
        candidates.append({**grid, key: pixels, grid_key: merged})
    return next((c for c in candidates if runs(getter, c)), grid)


def torch_tensor(values: list[int]) -> Any:
    import torch

    return torch.tensor(values)


def side_token_inputs(model: Any, generator: Any, batch: int, seq: int) -> dict[str, Any]:
    """Token ids of a second text tower the forward requires (InstructBLIP's `qformer_input_ids`
    for its Q-Former's instruction), in the vocabulary of the sub-config of that name."""
    import torch

    out: dict[str, Any] = {}
    for name, param in inspect.signature(model.forward).parameters.items():
        tower = name.removesuffix("_input_ids")
        if tower == name or tower in ("", "decoder") or param.default is not param.empty:
            continue
        vocab = getattr(getattr(model.config, f"{tower}_config", None), "vocab_size", None)
        if is_int(vocab):
            out[name] = torch.randint(0, vocab, (batch, seq), generator=generator)
    return out
