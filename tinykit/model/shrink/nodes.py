"""The walk over a config and its nested sub-configs: each node gets the generic rules in order.

A node is a config dict with a `model_type` (the top config, `text_config`, `vision_config`, ...).
Its sub-configs are shrunk first (a head's sizes may follow its backbone's), then its own keys:
knob values, settings dicts (`head_config`), the layer plan, a backbone's selected stages, the
recipe's `[set]` and `[derive]`, RoPE, and indexes into a vision tower's layers.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from tinykit._values import is_int
from tinykit.model.layers import LayerPlan, plan_layers
from tinykit.model.recipes import Recipe, recipe_for
from tinykit.model.shrink.derive import evaluate
from tinykit.model.shrink.knobs import knob_values
from tinykit.model.shrink.rope import rescale_rope_positions, shrink_rope
from tinykit.model.shrink.values import first_int, is_int_list
from tinykit.model.spec import ShrinkSpec


@dataclass
class Context:
    """What every node of one shrink shares, and what the walk records."""

    spec: ShrinkSpec
    vocab: int | None
    keep_depth: bool
    recipes: tuple[str, ...]
    plans: dict[str, LayerPlan]
    used: set[str]
    remote_code: bool


_DEPTH = "<depth>"  # the planned depth of a stack that has no depth key of its own


def shrink_node(
    full: dict[str, Any], base: dict[str, Any], path: str, ctx: Context
) -> dict[str, Any]:
    """Shrink one (sub)config: writes overrides into `base`, returns the node's shrunk values."""
    recipe = recipe_for(full.get("model_type") or "", ctx.recipes)
    ctx.used.update(recipe.sources)
    for key in recipe.drop if not ctx.remote_code else set(recipe.drop) - {"auto_map"}:
        base.pop(key, None)
    subs = _shrink_subs(full, base, path, ctx)
    overrides = knob_values(full, recipe, ctx.spec, ctx.vocab)
    overrides.update(_settings_dicts(full, recipe, ctx, path))
    _follow_backbone_patch_size(full, subs, overrides, recipe)
    if not ctx.keep_depth:
        overrides.update(_planned_depth(full, recipe, ctx, path))
    outputs = _backbone_outputs(full, ctx, path)
    if outputs:  # stage names and features follow from the depth and the indices
        for key in ("out_features", "stage_names"):
            base.pop(key, None)
        overrides.update(outputs)
    overrides.update(copy.deepcopy(recipe.set))
    merged = _derive(full, base, subs, overrides, recipe, path)
    shrink_rope(merged, overrides, recipe)
    _clamp_tower_layers(merged, overrides, subs.get("vision_config"), recipe)
    if "vision_config" not in subs:  # a tower's indexes into its own layers (Mllama's)
        _clamp_tower_layers(merged, overrides, merged, recipe)
    _rescale_pinpoints(full, merged, overrides)
    rescale_rope_positions(full, merged, overrides)
    base.update(overrides)
    return {**merged, **overrides}


def _shrink_subs(
    full: dict[str, Any], base: dict[str, Any], path: str, ctx: Context
) -> dict[str, Any]:
    """The node's sub-configs (those with a model_type of their own), each shrunk as a node."""
    return {
        key: shrink_node(
            value, base.setdefault(key, {"model_type": value["model_type"]}), f"{path}{key}.", ctx
        )
        for key, value in full.items()
        if isinstance(value, dict) and "model_type" in value
    }


def _settings_dicts(
    full: dict[str, Any], recipe: Recipe, ctx: Context, path: str
) -> dict[str, Any]:
    """Plain settings dicts (`head_config`, no model_type of their own) name sizes too."""
    return {
        key: _shrink_entry(value, {}, recipe, ctx, f"{path}{key}.")
        for key, value in full.items()
        if key.endswith("_config")
        and isinstance(value, dict)
        and "model_type" not in value
        and key not in recipe.drop
    }


def _follow_backbone_patch_size(
    full: dict[str, Any], subs: dict[str, Any], overrides: dict[str, Any], recipe: Recipe
) -> None:
    """A head's copy of its backbone's patch size (DPT necks reshape by it) follows the backbone."""
    for key in recipe.knobs["patch_size"]:
        for name, sub in subs.items():
            if key not in overrides and is_int(full.get(key)) and full[name].get(key) == full[key]:
                overrides[key] = sub.get(key, full[key])


def _planned_depth(full: dict[str, Any], recipe: Recipe, ctx: Context, path: str) -> dict[str, Any]:
    """The node's layer plan (model/layers.py) as overrides, recorded in `ctx.plans`."""
    plan = _layer_plan(full, recipe, ctx, path)
    if plan is None:
        return {}
    ctx.plans[path or "."] = plan
    out = {k: v for k, v in plan.fields.items() if k != _DEPTH}
    # a per-layer list of sizes (Gemma 3n's intermediate_size) keeps its entries capped
    planned = knob_values({**full, **plan.fields}, recipe, ctx.spec, ctx.vocab)
    out.update({k: v for k, v in planned.items() if k in plan.fields and isinstance(v, list)})
    for key in plan.keyed:  # per-layer overrides of a size are shrunk like the size itself
        out[key] = {
            layer: _shrink_entry(entry, full, recipe, ctx, f"{path}{key}.{layer}.")
            for layer, entry in out[key].items()
        }
    out.update(_other_depths(full, recipe, ctx, plan))
    return out


def _other_depths(
    full: dict[str, Any], recipe: Recipe, ctx: Context, plan: LayerPlan
) -> dict[str, int]:
    """Every other depth key of the node (xLSTM's num_blocks beside num_hidden_layers) follows
    the plan (at least 2 under auto, as a main stack: a one-layer encoder (RT-DETR's) must not
    leave its decoder one layer deep, where per-layer heads tied to layer 0 have nothing to tie)."""
    depth = max(len(plan.kept), 2 if ctx.spec.layers == "auto" else 1)
    keys = [*_depth_keys(full, recipe)[1:], *recipe.knobs["other_layers"]]
    return {key: min(full[key], depth) for key in keys if is_int(full.get(key))}


def _depth_keys(full: dict[str, Any], recipe: Recipe) -> list[str]:
    return [k for k in recipe.knobs["layers"] if is_int(full.get(k))]


def _layer_plan(full: dict[str, Any], recipe: Recipe, ctx: Context, path: str) -> LayerPlan | None:
    """The plan of the stack whose depth is the node's first depth key, or the length of its
    block-type list (NemotronH's layers_block_type); None where the node has neither."""
    keys = _depth_keys(full, recipe)
    depth_list = next(
        (k for k in recipe.layer_fields.get("depth_lists", ()) if _is_list(full.get(k))), None
    )
    if not (keys or depth_list):
        return None
    node = full if keys else {**full, _DEPTH: len(full[str(depth_list)])}
    return plan_layers(
        node,
        keys[0] if keys else _DEPTH,
        recipe.layer_fields,
        ctx.spec.layers,
        f"'{path or full.get('model_type')}'",
    )


def _derive(
    full: dict[str, Any],
    base: dict[str, Any],
    subs: dict[str, Any],
    overrides: dict[str, Any],
    recipe: Recipe,
    path: str,
) -> dict[str, Any]:
    """The node's values with the recipe's `[derive]` applied, where the node has the key; a
    dotted key (`text_config.hidden_size`) sets a sub-config's value."""
    merged = {**full, **subs, **overrides}
    for key, expr in recipe.derive.items():
        sub, _, leaf = key.partition(".")
        if leaf and sub in subs and leaf in subs[sub]:
            value = evaluate(expr, merged, f"{path}{key}")
            base[sub][leaf] = merged[sub][leaf] = value
        elif key in full:
            overrides[key] = merged[key] = evaluate(expr, merged, f"{path}{key}")
    return merged


def _shrink_entry(
    entry: dict[str, Any], full: dict[str, Any], recipe: Recipe, ctx: Context, where: str
) -> dict[str, Any]:
    """A per-layer override (`per_layer_config["5"]`): its sizes get the node's rules and derivations."""
    merged = {**full, **entry}
    values = {
        k: v for k, v in knob_values(merged, recipe, ctx.spec, ctx.vocab).items() if k in entry
    }
    merged.update(values)
    for key, expr in recipe.derive.items():
        if key in entry:
            values[key] = merged[key] = evaluate(expr, merged, f"{where}{key}")
    return {**entry, **values}


def _backbone_outputs(full: dict[str, Any], ctx: Context, path: str) -> dict[str, Any]:
    """A backbone's selected stages (`out_indices`), kept as many as the source selects: a neck
    or decoder reads one feature map per selected stage (DPT's neck_hidden_sizes, UperNet's
    in_channels), so a tiny backbone that yields fewer breaks the head.

    Stage backbones (ResNet, Swin) keep their stage count, so the source's selection stands.
    A layer stack (ViT) selects its last layers; a stack of one block type planned shallower
    than the selection is deepened to it (`stage_names` follow from the depth)."""
    indices = _selected_stages(full)
    if indices is None:
        return {}
    plan = ctx.plans.get(path or ".")
    out: dict[str, Any] = {}
    if plan is None or ctx.keep_depth:
        return {"out_indices": indices}
    stem = [0] if 0 in indices else []
    wanted, depth = len(indices) - len(stem), len(plan.kept)
    homogeneous = plan.distinct == 1 and set(plan.fields) == {plan.depth_key}
    # (a slice keeps exactly the layers asked for)
    if wanted > depth and homogeneous and not isinstance(ctx.spec.layers, tuple):
        depth = min(wanted, plan.source_depth)
        out[plan.depth_key] = depth
    return {**out, "out_indices": stem + list(range(max(1, depth - wanted + 1), depth + 1))}


def _selected_stages(full: dict[str, Any]) -> list[int] | None:
    """The backbone's `out_indices` as stage indexes (sorted, not negative); None without."""
    selected, names = full.get("out_indices"), full.get("stage_names")
    if not isinstance(selected, list) or not is_int_list(selected) or not isinstance(names, list):
        return None
    return sorted({i % len(names) for i in selected})


def _clamp_tower_layers(
    merged: dict[str, Any], overrides: dict[str, Any], tower: dict[str, Any] | None, recipe: Recipe
) -> None:
    """Indexes into the shrunk vision tower's layers or hidden states (VipLLaVA's five layers,
    Molmo2's adapter's two) are clamped to its depth, keeping their count and sign."""
    depth = first_int(tower or {}, recipe.knobs["layers"])
    if depth is None:
        return
    keys = recipe.layer_fields.get("tower_layer_refs", ())
    for name, node in _node_and_settings(merged, tower):
        for key in keys:
            value: Any = node.get(key)
            if not (is_int(value) or is_int_list(value)):
                continue
            fixed = _clamped(value, depth)
            if name:
                overrides[name] = merged[name] = {**node, key: fixed}
            else:
                overrides[key] = merged[key] = fixed


def _node_and_settings(
    merged: dict[str, Any], tower: dict[str, Any] | None
) -> list[tuple[str, dict[str, Any]]]:
    """The node ("") and its settings dicts and sub-configs (Molmo2's adapter_config) by key,
    the tower left out."""
    return [
        ("", merged),
        *(
            (k, v)
            for k, v in merged.items()
            if k.endswith("_config") and isinstance(v, dict) and v is not tower
        ),
    ]


def _clamped(value: int | list[int], depth: int) -> int | list[int]:
    """Layer indexes within the tower's layers (0 .. depth - 1), sign kept: valid as a layer
    index (Molmo2 validates so) and as an index into its depth + 1 hidden states alike."""

    def clamp(v: int) -> int:
        return max(v, -depth) if v < 0 else min(v, depth - 1)

    return [clamp(v) for v in value] if isinstance(value, list) else clamp(value)


def _rescale_pinpoints(
    full: dict[str, Any], merged: dict[str, Any], overrides: dict[str, Any]
) -> None:
    """Any-resolution grids (LLaVA-NeXT's `image_grid_pinpoints`, multiples of the tower's image
    side) are scaled with the tower's image side, so that every tile is one tiny image."""
    grid = merged.get("image_grid_pinpoints")
    before = (full.get("vision_config") or {}).get("image_size")
    after = (merged.get("vision_config") or {}).get("image_size")
    if not (isinstance(grid, list) and is_int(before) and is_int(after)) or before == after:
        return
    if _on_grid(grid, before):
        overrides["image_grid_pinpoints"] = merged["image_grid_pinpoints"] = [
            [v // before * after for v in pair] for pair in grid
        ]


def _on_grid(grid: list[Any], side: int) -> bool:
    """Every entry of `grid` a pair of ints, multiples of `side`."""
    return all(is_int_list(pair) and all(v % side == 0 for v in pair) for pair in grid)


def _is_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value)
