"""Pixels as patches, where a tower reads them so: flattened patch rows with each image's patch
grid (patch-merging towers, Qwen2-VL's), Pix2Struct's rows of (position, patch), MiniCPM-V's
packed strip, native-resolution (NaFlex) rows with a mask, in the layout the tower runs on.
"""

from __future__ import annotations

from typing import Any

from tinykit._values import is_int
from tinykit.frontend.processors import processors
from tinykit.model.inputs.forward import Forward, keep_accepted, runs
from tinykit.model.inputs.placement import getter_params, image_features_getter

GRID_INPUTS = ("grid_thw", "image_grid_thw", "image_grid_hw")
"""Forward arguments naming each image's (t, h, w) patch grid, beside its flattened patches
(`_hw`: the (h, w) grid alone, Nemotron-H Omni's)."""


def grid_key(f: Forward) -> str | None:
    """The patch-grid argument of a patch-merging tower alone (Qwen2-VL's), if it has one."""
    return next((g for g in GRID_INPUTS if g in f.params), None)


def grid_patch_inputs(f: Forward, key: str | None = None) -> dict[str, Any]:
    """Patch rows and their grid in the layout the model's image features read: what its forward
    and its `get_image_features` name (VideoLLaMA 3's merge sizes), unflattened where needed."""
    key = key or grid_key(f) or "image_grid_thw"
    getter = image_features_getter(f.model)
    patches = _patch_grid(f, f.names | getter_params(f.model), key)
    return square_patches(f, _unflattened_if_needed(getter, f.vision, patches))


def _patch_grid(f: Forward, params: set[str], grid_key: str) -> dict[str, Any]:
    """What the processors of patch-merging towers emit: every image's patches flattened to rows
    of channels x temporal patch x patch x patch values, and each image's (t, h, w) patch grid,
    h and w two merge windows wide."""
    import torch

    def setting(*names: str, default: int) -> int:
        values: list[Any] = [getattr(f.vision, n, None) for n in names]
        return next((int(v) for v in values if is_int(v)), default)

    channels = setting("in_channels", "num_channels", "in_chans", default=3)
    patch = setting("patch_size", default=8)
    temporal = setting("temporal_patch_size", "patch_temporal", default=1)
    side = 2 * setting("spatial_merge_size", "merge_size", default=1)
    rows = f.batch * side * side
    key = "hidden_states" if "hidden_states" in params else "pixel_values"
    patches = torch.randn(rows, channels * temporal * patch * patch, generator=f.generator)
    grid = [1, side, side][-2:] if grid_key.endswith("_hw") else [1, side, side]
    out = {key: patches, grid_key: torch.tensor([grid] * f.batch)}
    for name in ("merge_sizes", "image_merge_sizes"):  # each image's merge window (VideoLLaMA 3's)
        if name in params:
            out[name] = torch.tensor([side // 2] * f.batch)
    return out


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


def square_patches(f: Forward, grid: dict[str, Any]) -> dict[str, Any]:
    """Flattened patch rows, or the first other layout of the same values that runs where they do
    not: for a tower whose patch embedding is a 2D convolution over each patch (Kimi-K2.5's),
    (patches, channels, patch, patch); for one that reads channels-last pixels and a grid of
    merged tokens (Inkling2's), one (merge, patch, merge, patch, channels) block per token and
    the grid divided by the merge size."""
    import torch

    key = "pixel_values" if "pixel_values" in grid else "hidden_states"
    getter = image_features_getter(f.model) or f.model
    side = getattr(f.vision, "patch_size", None)
    rows = grid[key]
    if not is_int(side) or rows.dim() != 2 or rows.shape[-1] % (side * side) or runs(getter, grid):
        return grid
    candidates = [{**grid, key: rows.view(len(rows), -1, side, side)}]
    merge = getattr(f.vision, "spatial_merge_size", None)
    grid_name = next((k for k in GRID_INPUTS if k in grid), None)
    if is_int(merge) and grid_name is not None:
        merged = grid[grid_name] // torch.tensor([1, merge, merge])
        channels = rows.shape[-1] // (side * side)
        pixels = rows.reshape(-1, merge, side, merge, side, channels)
        candidates.append({**grid, key: pixels, grid_name: merged})
    return next((c for c in candidates if runs(getter, c)), grid)


def flattened_patch_inputs(f: Forward) -> dict[str, Any]:
    """Pix2Struct's variable-resolution input: up to 16 patches per image, each a row of its
    (row, column) position and its patch x patch pixels, as wide as the tower's patch embedding
    reads (`patch_embed_hidden_size`), through the type's image processor where it builds."""
    import numpy as np
    import torch

    width = getattr(f.vision, "patch_embed_hidden_size", None)
    width = width if is_int(width) else 3 * 16 * 16
    patch, rows = max(1, int((width // 3) ** 0.5)), 16
    rng = np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=f.generator)))
    shape = (4 * patch, 4 * patch, 3)
    images = [rng.integers(0, 256, shape, dtype=np.uint8) for _ in range(f.batch)]
    geometry = {"patch_size": {"height": patch, "width": patch}, "max_patches": rows}
    for processor in processors("image", f.config.model_type, geometry):
        try:
            raw = processor(images=images, return_tensors="pt", max_patches=rows)
            out = keep_accepted(raw, f.names)
        except Exception:  # this geometry does not suit the processor: random rows instead
            continue
        patches = out.get("flattened_patches")
        if patches is not None and patches.shape[-1] == 2 + width:
            return out
    side = int(rows**0.5)
    positions = torch.tensor([[r, c] for r in range(1, side + 1) for c in range(1, side + 1)])
    pixels = torch.randn(f.batch, rows, width, generator=f.generator)
    patches = torch.cat([positions.expand(f.batch, rows, 2).float(), pixels], dim=-1)
    return {"flattened_patches": patches, "attention_mask": torch.ones(f.batch, rows)}


def packed_patch_inputs(f: Forward) -> dict[str, Any]:
    """What MiniCPM-V's processor emits: every image's patches side by side in one strip of
    patch-high pixels (batch of one), and each image's (h, w) patch grid in `target_sizes`,
    whole merge windows (merge_kernel_size, merged twice) wide."""
    import torch

    patch = getattr(f.vision, "patch_size", 8)
    kernel = getattr(f.config, "merge_kernel_size", None) or (2, 2)
    side = int(kernel[0]) ** 2
    channels = getattr(f.vision, "num_channels", 3) or 3
    width = f.batch * side * side * patch
    pixels = torch.randn(1, channels, patch, width, generator=f.generator)
    return {"pixel_values": pixels, "target_sizes": torch.tensor([[side, side]] * f.batch)}


def native_patch_inputs(f: Forward) -> dict[str, Any]:
    """What native-resolution (NaFlex) processors emit, Siglip2's and LFM2-VL's: each image's
    patches as rows of channels x patch x patch values padded to the tower's `num_patches`, the
    (h, w) patch grid of each image and a mask of the real rows. The grid is 4 x 4 patches (a
    whole number of 2 x 2 merge windows)."""
    import torch

    channels = getattr(f.vision, "num_channels", 3) or 3
    patch = getattr(f.vision, "patch_size", 16)
    rows = getattr(f.vision, "num_patches", 16)
    rows = rows if is_int(rows) and rows >= 16 else 16
    pixels = torch.randn(f.batch, rows, channels * patch * patch, generator=f.generator)
    mask = torch.zeros(f.batch, rows, dtype=torch.long)
    mask[:, :16] = 1
    shapes = torch.tensor([[4, 4]] * f.batch)
    return {"pixel_values": pixels, "spatial_shapes": shapes, "pixel_attention_mask": mask}
