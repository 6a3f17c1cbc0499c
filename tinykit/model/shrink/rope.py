"""RoPE parameters of a shrunk node: per-dimension lists and MRoPE sections follow the new
head_dim, and scaled RoPE keeps its ratio when the positions shrink."""

from __future__ import annotations

import copy
import math
from typing import Any

from tinykit._values import is_int
from tinykit.errors import ShrinkConstraintError
from tinykit.model.recipes import Recipe
from tinykit.model.shrink.values import first_int

MROPE_AXES = (2, 3, 3)
"""Proportions of the (time, height, width) rotary sections where a config gives none."""
POSITIONS = "max_position_embeddings"
ORIGINAL = "original_max_position_embeddings"


def shrink_rope(merged: dict[str, Any], overrides: dict[str, Any], recipe: Recipe) -> None:
    """Per-dimension RoPE lists must match the new head_dim; per-layer-type dicts stay keyed."""
    rope = merged.get("rope_parameters") or merged.get("rope_scaling")
    if not isinstance(rope, dict):
        return
    head_dim = _head_dim(merged, recipe)
    if head_dim is None:
        return
    rope = copy.deepcopy(rope)
    for params in _rope_tables(rope):
        factor = params.get("partial_rotary_factor", merged.get("partial_rotary_factor"))
        rotary_half = int(head_dim * (factor if isinstance(factor, int | float) else 1)) // 2
        for key in ("long_factor", "short_factor"):
            if isinstance(params.get(key), list):
                params[key] = params[key][:rotary_half]
        section = _mrope_section(params, merged, top=params is rope)
        if isinstance(section, list):
            params["mrope_section"] = split_like(section, rotary_half)
    overrides[_rope_key(merged)] = rope


def _head_dim(merged: dict[str, Any], recipe: Recipe) -> int | None:
    """The node's head_dim, else its width over its head count (named as the recipe's [knobs]
    name them)."""
    if is_int(merged.get("head_dim")):
        return merged["head_dim"]
    heads = first_int(merged, recipe.knobs["heads"])
    width = first_int(merged, recipe.knobs["width"])
    return width // heads if width and heads else None


def _rope_tables(rope: dict[str, Any]) -> list[dict[str, Any]]:
    """The rope parameters and each per-layer-type table inside them."""
    return [rope, *[v for v in rope.values() if isinstance(v, dict)]]


def _rope_key(merged: dict[str, Any]) -> str:
    return "rope_parameters" if "rope_parameters" in merged else "rope_scaling"


def _mrope_section(params: dict[str, Any], merged: dict[str, Any], *, top: bool) -> Any:
    section = params.get("mrope_section")
    if section is None and top and _reads_mrope(merged.get("model_type")):
        # the model falls back to a full-size section ([16, 24, 24]) when the key is absent
        return list(MROPE_AXES)
    return section


def _reads_mrope(model_type: Any) -> bool:
    """Whether the type's model reads `mrope_section` from its rope parameters (the config class
    tells its rope validation to let that key through)."""
    from transformers import CONFIG_MAPPING

    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return False
    cls = CONFIG_MAPPING[model_type]
    return "mrope_section" in (getattr(cls, "ignore_keys_at_rope_validation", None) or ())


def rescale_rope_positions(
    full: dict[str, Any], merged: dict[str, Any], overrides: dict[str, Any]
) -> None:
    """Scaled RoPE keeps its ratio when positions shrink: ``original_max_position_embeddings``
    becomes ``positions / factor`` (and positions a multiple of it), or transformers warns on
    every load (8192 original against 512 positions for Llama 3, a YaRN factor mismatch)."""
    positions = _shrunk_positions(full, merged)
    rope = merged.get("rope_parameters") or merged.get("rope_scaling")
    if positions is None or not isinstance(rope, dict):
        return
    before, after = positions
    rope = overrides.get("rope_parameters", overrides.get("rope_scaling", copy.deepcopy(rope)))
    top = merged.get(ORIGINAL)  # Phi-3 keeps it beside, not inside, rope_scaling
    for params in _rope_tables(rope):
        original = _original_positions(params, top if params is rope else None)
        if original is None:
            continue
        shrunk, factor = _shrunk_original(params, before, after, original)
        if ORIGINAL in params:
            params[ORIGINAL] = shrunk
        if is_int(top):
            overrides[ORIGINAL] = merged[ORIGINAL] = shrunk
        _fit_positions(merged, overrides, shrunk * factor, after)
    overrides[_rope_key(merged)] = rope


def _fit_positions(
    merged: dict[str, Any], overrides: dict[str, Any], scaled: float, after: int
) -> None:
    """Positions become the shrunk original times its factor, where a whole count that fits."""
    if float(scaled).is_integer() and 0 < scaled <= after:
        overrides[POSITIONS] = merged[POSITIONS] = int(scaled)


def _shrunk_positions(full: dict[str, Any], merged: dict[str, Any]) -> tuple[int, int] | None:
    """(before, after): the positions of the full config and of the tiny one, where fewer."""
    before, after = full.get(POSITIONS), merged.get(POSITIONS)
    if isinstance(before, int) and isinstance(after, int) and after < before:
        return before, after
    return None


def _original_positions(params: dict[str, Any], default: Any) -> int | None:
    """The table's original positions (else `default`), where a positive count."""
    original = params.get(ORIGINAL, default)
    return original if is_int(original) and original > 0 else None


def _shrunk_original(
    params: dict[str, Any], before: int, after: int, original: int
) -> tuple[int, float]:
    """The original positions shrunk by the table's factor, and that factor; written into the
    table where it had none (the one its positions implied) or where it leaves fewer than 2."""
    factor = params.get("factor")
    if not isinstance(factor, int | float) or factor <= 0:
        factor = params["factor"] = before / original  # what it implied (Phi-3's longrope)
    shrunk = int(after // factor)
    if shrunk < 2:
        # LongRoPE and YaRN divide by log(original): keep 2 original positions, a smaller
        # factor (only a spec of fewer positions than 2 x factor gets here)
        factor = params["factor"] = max(1.0, after / 2)
        shrunk = max(1, int(after // factor))
    return shrunk, factor


def split_like(parts: list[int], total: int) -> list[int]:
    """Split `total` into len(parts) integers in the proportions of `parts`: all positive where
    total allows, else ones for the largest parts and empty sections (a split of 0) for the rest."""
    n = len(parts)
    if total < 1:
        raise ShrinkConstraintError(
            f"mrope_section {parts} needs a rotated head width of at least 2, got {2 * total}. "
            "Use a larger --hidden or fewer --heads.",
            field="hidden",
            value=total * 2,
            constraint="rotated head_dim >= 2",
        )
    if total < n:
        largest = sorted(range(n), key=lambda i: (parts[i], i), reverse=True)[:total]
        return [1 if i in largest else 0 for i in range(n)]
    scaled = [p * (total - n) / sum(parts) for p in parts]
    out = [1 + math.floor(s) for s in scaled]
    for i in sorted(range(n), key=lambda i: scaled[i] - math.floor(scaled[i]), reverse=True)[
        : total - sum(out)
    ]:
        out[i] += 1
    return _equal_parts_kept(parts, out)


def _equal_parts_kept(parts: list[int], out: list[int]) -> list[int]:
    """Sections equal in the source stay equal (ERNIE-4.5-VL interleaves its height and width
    frequencies pairwise), the remainder going to a section of its own size, where there is one."""
    unique = [i for i in range(len(parts)) if parts.count(parts[i]) == 1]
    if not unique:
        return out
    fixed = [min(out[j] for j in range(len(parts)) if parts[j] == p) for p in parts]
    fixed[max(unique, key=lambda i: parts[i])] += sum(out) - sum(fixed)
    return fixed
