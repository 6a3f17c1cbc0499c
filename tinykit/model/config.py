"""Shrink a transformers config: the generic rules, applied to every nested sub-config.

The source config is loaded through its class (so class defaults fill what config.json
omits), read as a full dict, and every knob the recipe vocabulary names is given its tiny
value. The result is written onto the source's *diff* dict (only what differs from the
class defaults) and built through the constructor again, so every derived attribute
(`head_dim`, `layer_types`, ...) is recomputed rather than left stale.
"""

from __future__ import annotations

import ast
import copy
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from tinykit.errors import ShrinkConstraintError, UnsupportedModelError
from tinykit.model.layers import LayerPlan, plan_layers
from tinykit.model.recipes import Recipe, recipe_for
from tinykit.model.spec import ShrinkSpec


@dataclass
class ShrunkConfig:
    """A built tiny config and how it was derived."""

    config: Any
    plans: dict[str, LayerPlan] = field(default_factory=dict)
    recipes: tuple[str, ...] = ()


def config_class(model_type: str) -> type:
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise UnsupportedModelError(
            f"model_type {model_type!r} is not in this transformers' CONFIG_MAPPING. It needs remote "
            f"code or a newer transformers: upgrade transformers, or pass --trust-remote-code for a Hub repo.",
            model_type=model_type,
        )
    return CONFIG_MAPPING[model_type]


def load_config(raw: dict[str, Any], remote_code: Path | None = None) -> Any:
    """The source config object (class defaults filled in).

    Native model types drop `auto_map`; `remote_code` (a folder, on --trust-remote-code) loads a
    non-native type's class from the repository's own code instead.
    """
    if remote_code is not None:
        from transformers import AutoConfig

        cls = type(AutoConfig.from_pretrained(remote_code, trust_remote_code=True))
        return cls.from_dict(raw)
    cls = config_class(raw["model_type"])
    try:
        return cls.from_dict({k: v for k, v in raw.items() if k != "auto_map"})
    except Exception as e:  # transformers raises many kinds on a malformed config
        raise UnsupportedModelError(
            f"config.json of model_type {raw['model_type']!r} does not load with {cls.__name__}: {e}. "
            f"Check the file, or the transformers version it needs.",
            model_type=raw["model_type"],
        ) from e


def shrink_config(
    raw: dict[str, Any],
    spec: ShrinkSpec,
    *,
    vocab: int | None = None,
    token_ids: dict[int, int] | None = None,
    keep_depth: bool = False,
    recipes: tuple[str, ...] = (),
    remote_code: Path | None = None,
) -> ShrunkConfig:
    """Shrink `raw` (a config.json dict) to `spec`.

    The vocab becomes `vocab` (a shrunk tokenizer's size) or spec.vocab; in faithful mode the
    source's vocab and token ids are kept.

    `keep_depth=True` shrinks the width only: the result has the source's layer structure,
    for comparing block types. `token_ids` maps source special-token ids to tiny ones.
    """
    source = load_config(raw, remote_code)
    full = source.to_dict()
    base = source.to_diff_dict()
    original = copy.deepcopy(base)
    plans: dict[str, LayerPlan] = {}
    used: set[str] = set()
    faithful = spec.mode == "faithful"
    vocab = None if faithful else vocab or spec.vocab
    ctx = _Context(spec, vocab, keep_depth, recipes, plans, used, remote_code is not None)
    _shrink_node(full, base, "", ctx)
    _give_image_token(full, base)
    if vocab is not None:
        remap_token_ids(base, vocab, token_ids)
    _drop_derived(type(source), base, original)
    try:
        config = type(source).from_dict(base)
        if hasattr(config, "validate"):
            config.validate()
    except ShrinkConstraintError:
        raise
    except Exception as e:
        raise ShrinkConstraintError(
            f"the shrunk {raw['model_type']} config is invalid: {e}. Try other sizes, or add a recipe "
            f"(recipes/*.toml, or --recipe PATH) that sets the field it names.",
            field="config",
            value=raw["model_type"],
            constraint=str(e),
        ) from e
    return ShrunkConfig(config, plans, tuple(sorted(used)))


def _drop_derived(cls: Any, base: dict[str, Any], original: dict[str, Any]) -> None:
    """Keys the config class computes itself from its fields (EfficientLoFTR's per-block channel
    lists, from `out_features`) are left to it: the source's full-size values, saved beside
    the fields and untouched by the shrink, would otherwise be set back over the recomputed
    ones."""
    import dataclasses

    config_class = cls  # (is_dataclass narrows cls to a dataclass type, which lacks from_dict)
    if not dataclasses.is_dataclass(cls):
        return
    fields = {f.name for f in dataclasses.fields(cls)}
    stale = [
        k
        for k, v in base.items()
        if k not in fields and k in original and original[k] == v and not isinstance(v, dict)
    ]
    if not stale:
        return
    try:
        probe = config_class.from_dict({k: v for k, v in base.items() if k not in stale})
    except Exception:  # the shrunk config's own errors are reported by the caller
        return
    for key in stale:
        if hasattr(probe, key) and getattr(probe, key) != base[key]:
            base.pop(key)


def _give_image_token(full: dict[str, Any], base: dict[str, Any]) -> None:
    """An image-text default whose image token the class leaves None (MiniCPM-V's, Nemotron-H
    Omni's; every real config names one) ignores its vision tower: it gets the id just past the
    source vocab, which the token-id remap then places at the tiny vocab's top."""
    if "vision_config" not in full:
        return
    text = full.get("text_config")
    source_vocab = (text if isinstance(text, dict) else full).get("vocab_size")
    for key in ("image_token_id", "image_token_index"):
        if key in full and full[key] is None and _is_int(source_vocab):
            base[key] = source_vocab
            return


@dataclass
class _Context:
    spec: ShrinkSpec
    vocab: int | None
    keep_depth: bool
    recipes: tuple[str, ...]
    plans: dict[str, LayerPlan]
    used: set[str]
    remote_code: bool


def _shrink_node(
    full: dict[str, Any], base: dict[str, Any], path: str, ctx: _Context
) -> dict[str, Any]:
    """Shrink one (sub)config: writes overrides into `base`, returns the node's shrunk values."""
    recipe = recipe_for(full.get("model_type") or "", ctx.recipes)
    ctx.used.update(recipe.sources)
    for key in recipe.drop if not ctx.remote_code else set(recipe.drop) - {"auto_map"}:
        base.pop(key, None)
    shrunk_subs = {}
    for key, value in full.items():
        if isinstance(value, dict) and "model_type" in value:
            sub = base.setdefault(key, {"model_type": value["model_type"]})
            shrunk_subs[key] = _shrink_node(value, sub, f"{path}{key}.", ctx)
    overrides = _knob_values(full, recipe, ctx)
    for key, value in full.items():  # plain settings dicts (`head_config`) name sizes too
        if (
            key.endswith("_config")
            and isinstance(value, dict)
            and "model_type" not in value
            and key not in recipe.drop
        ):
            overrides[key] = _shrink_entry(value, {}, recipe, ctx, f"{path}{key}.")
    # a head's copy of its backbone's patch size (DPT necks reshape by it) follows the backbone
    for key in recipe.knobs["patch_size"]:
        for name, sub in shrunk_subs.items():
            if key not in overrides and _is_int(full.get(key)) and full[name].get(key) == full[key]:
                overrides[key] = sub.get(key, full[key])
    layer_keys = [k for k in recipe.knobs["layers"] if _is_int(full.get(k))]
    # a stack whose depth is the length of its block-type list (NemotronH's layers_block_type)
    depth_list = next(
        (k for k in recipe.layer_fields.get("depth_lists", ()) if _is_list(full.get(k))), None
    )
    if (layer_keys or depth_list) and not ctx.keep_depth:
        node = full if layer_keys else {**full, _DEPTH: len(full[str(depth_list)])}
        plan = plan_layers(
            node,
            layer_keys[0] if layer_keys else _DEPTH,
            recipe.layer_fields,
            ctx.spec.layers,
            f"'{path or full.get('model_type')}'",
        )
        ctx.plans[path or "."] = plan
        overrides.update({k: v for k, v in plan.fields.items() if k != _DEPTH})
        # a per-layer list of sizes (Gemma 3n's intermediate_size) keeps its entries capped
        overrides.update(
            {
                k: v
                for k, v in _knob_values({**full, **plan.fields}, recipe, ctx).items()
                if k in plan.fields and isinstance(v, list)
            }
        )
        for key in plan.keyed:  # per-layer overrides of a size are shrunk like the size itself
            overrides[key] = {
                layer: _shrink_entry(entry, full, recipe, ctx, f"{path}{key}.{layer}.")
                for layer, entry in overrides[key].items()
            }
        # every other depth key of the node (xLSTM's num_blocks beside num_hidden_layers) follows
        # (at least 2 under auto, as a main stack: a one-layer encoder (RT-DETR's) must not leave
        # its decoder one layer deep, where per-layer heads tied to layer 0 have nothing to tie)
        depth = max(len(plan.kept), 2 if ctx.spec.layers == "auto" else 1)
        for key in [*layer_keys[1:], *recipe.knobs["other_layers"]]:
            if _is_int(full.get(key)):
                overrides[key] = min(full[key], depth)
    outputs = _backbone_outputs(full, ctx, path)
    if outputs:  # stage names and features follow from the depth and the indices
        for key in ("out_features", "stage_names"):
            base.pop(key, None)
        overrides.update(outputs)
    overrides.update(copy.deepcopy(recipe.set))
    merged = {**full, **shrunk_subs, **overrides}
    for key, expr in recipe.derive.items():
        sub, _, leaf = key.partition(".")  # a dotted key sets a sub-config's value
        if leaf and sub in shrunk_subs and leaf in shrunk_subs[sub]:
            value = _evaluate(expr, merged, f"{path}{key}")
            base[sub][leaf] = merged[sub][leaf] = value
            continue
        if key not in full:
            continue
        overrides[key] = merged[key] = _evaluate(expr, merged, f"{path}{key}")
    _shrink_rope(merged, overrides, recipe)
    _clamp_tower_layers(merged, overrides, shrunk_subs.get("vision_config"), recipe)
    if "vision_config" not in shrunk_subs:  # a tower's indexes into its own layers (Mllama's)
        _clamp_tower_layers(merged, overrides, merged, recipe)
    _rescale_pinpoints(full, merged, overrides)
    _rescale_rope_positions(full, merged, overrides)
    base.update(overrides)
    return {**merged, **overrides}


def _clamp_tower_layers(
    merged: dict[str, Any], overrides: dict[str, Any], tower: dict[str, Any] | None, recipe: Recipe
) -> None:
    """Indexes into the shrunk vision tower's layers or hidden states (VipLLaVA's five layers,
    Molmo2's adapter's two) are clamped to its depth, keeping their count and sign."""
    depth = _first_int(tower or {}, recipe.knobs["layers"])
    if depth is None:
        return
    keys = recipe.layer_fields.get("tower_layer_refs", ())

    # within the tower's layers (0 .. depth - 1): valid as a layer index (Molmo2 validates so)
    # and as an index into its depth + 1 hidden states alike
    def clamp(v: int) -> int:
        return max(v, -depth) if v < 0 else min(v, depth - 1)

    nodes = [  # the node, its settings dicts and sub-configs (Molmo2's adapter_config)
        ("", merged),
        *(
            (k, v)
            for k, v in merged.items()
            if k.endswith("_config") and isinstance(v, dict) and v is not tower
        ),
    ]
    for name, node in nodes:
        for key in keys:
            value: Any = node.get(key)
            if _is_int(value) or _is_int_list(value):
                fixed = [clamp(v) for v in value] if isinstance(value, list) else clamp(value)
                if name:
                    overrides[name] = merged[name] = {**node, key: fixed}
                else:
                    overrides[key] = merged[key] = fixed


def _rescale_pinpoints(
    full: dict[str, Any], merged: dict[str, Any], overrides: dict[str, Any]
) -> None:
    """Any-resolution grids (LLaVA-NeXT's `image_grid_pinpoints`, multiples of the tower's image
    side) are scaled with the tower's image side, so that every tile is one tiny image."""
    grid = merged.get("image_grid_pinpoints")
    before = (full.get("vision_config") or {}).get("image_size")
    after = (merged.get("vision_config") or {}).get("image_size")
    if not (isinstance(grid, list) and _is_int(before) and _is_int(after)) or before == after:
        return
    if all(_is_int_list(pair) and all(v % before == 0 for v in pair) for pair in grid):
        overrides["image_grid_pinpoints"] = merged["image_grid_pinpoints"] = [
            [v // before * after for v in pair] for pair in grid
        ]


_DEPTH = "<depth>"  # the planned depth of a stack that has no depth key of its own


def _backbone_outputs(full: dict[str, Any], ctx: _Context, path: str) -> dict[str, Any]:
    """A backbone's selected stages (`out_indices`), kept as many as the source selects: a neck
    or decoder reads one feature map per selected stage (DPT's neck_hidden_sizes, UperNet's
    in_channels), so a tiny backbone that yields fewer breaks the head.

    Stage backbones (ResNet, Swin) keep their stage count, so the source's selection stands.
    A layer stack (ViT) selects its last layers; a stack of one block type planned shallower
    than the selection is deepened to it (`stage_names` follow from the depth)."""
    selected, names = full.get("out_indices"), full.get("stage_names")
    if not isinstance(selected, list) or not _is_int_list(selected) or not isinstance(names, list):
        return {}
    indices = sorted({i % len(names) for i in selected})
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


def _is_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value)


def _shrink_entry(
    entry: dict[str, Any], full: dict[str, Any], recipe: Recipe, ctx: _Context, where: str
) -> dict[str, Any]:
    """A per-layer override (`per_layer_config["5"]`): its sizes get the node's rules and derivations."""
    merged = {**full, **entry}
    values = {k: v for k, v in _knob_values(merged, recipe, ctx).items() if k in entry}
    merged.update(values)
    for key, expr in recipe.derive.items():
        if key in entry:
            values[key] = merged[key] = _evaluate(expr, merged, f"{where}{key}")
    return {**entry, **values}


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _divisor_at_most(n: int, limit: int, even_quotient: bool = True) -> int:
    """The largest d <= limit dividing n (with n/d even when asked), at least 1."""
    for d in range(max(1, min(n, limit)), 0, -1):
        if n % d == 0 and (not even_quotient or (n // d) % 2 == 0):
            return d
    return 1


# Knobs capped per key (and per entry of a list) at a spec size, rather than set to one width.
ELEMENTWISE = {
    "intermediate": "intermediate",
    "expert_intermediate": "expert_intermediate",
    "channels": "hidden",
}


PATCH_MERGING = ("spatial_merge_size", "temporal_patch_size", "merge_size", "patch_temporal")
"""Keys of towers that read flattened patches (Qwen2-VL's): any patch size fits their input."""


# Knobs whose keys may hold one value per stage of a vision backbone, shrunk entry by entry.
PER_STAGE = ("width", "heads", "image_size", "patch_size", "stage_depths")


def _knob_values(full: dict[str, Any], recipe: Recipe, ctx: _Context) -> dict[str, Any]:
    spec, out = ctx.spec, {}
    knob_keys = {
        knob: [k for k in keys if _is_int(full.get(k))] for knob, keys in recipe.knobs.items()
    }
    # Where a class leaves these None its model cannot be built: give them their tiny value.
    for knob in ("vocab", "head_dim", "kv_heads", "experts_per_tok"):
        knob_keys[knob] = [
            k for k in recipe.knobs[knob] if k in full and (full[k] is None or _is_int(full[k]))
        ]
    # MLP widths and channel counts may be per-layer lists: each entry is capped
    for knob in ELEMENTWISE:
        knob_keys[knob] += [k for k in recipe.knobs.get(knob, ()) if _is_int_list(full.get(k))]
    # per-stage lists of vision backbones (widths, heads, image sides, stage depths)
    per_stage: dict[str, list[str]] = {
        knob: [k for k in recipe.knobs.get(knob, ()) if _is_int_list(full.get(k))]
        for knob in PER_STAGE
    }
    patches = bool(knob_keys["image_size"] or per_stage["image_size"]) or any(
        _is_int(full.get(k)) for k in PATCH_MERGING
    )
    # a width of 0 means "none" (DPR's projection_dim: no projection) and stays 0
    width = min([full[k] for k in knob_keys["width"] if full[k] > 0] + [spec.hidden])
    heads_src = full[knob_keys["heads"][0]] if knob_keys["heads"] else None
    heads = _divisor_at_most(width, min(spec.heads, heads_src or spec.heads))
    experts = None
    for knob, keys in knob_keys.items():
        for key in keys:
            v = full[key]
            if knob == "width":
                out[key] = width if v > 0 else v
            elif knob == "heads":
                out[key] = heads
            elif knob == "kv_heads":
                out[key] = (
                    heads
                    if v is None or heads_src is not None and v >= heads_src
                    else _divisor_at_most(heads, min(v, spec.kv_heads), even_quotient=False)
                )
            elif knob == "head_dim":
                out[key] = width // heads
            elif knob in ELEMENTWISE:
                out[key] = _capped(v, getattr(spec, ELEMENTWISE[knob]))
            elif knob == "vocab" and ctx.vocab is not None:
                out[key] = ctx.vocab
            elif knob == "positions":
                out[key] = min(v, spec.max_positions)
            elif knob == "experts":
                experts = out[key] = min(v, spec.experts) if v >= 2 else v
            elif knob == "at_most_one":
                out[key] = min(v, 1)
            elif knob == "window":
                out[key] = min(v, spec.window)
            elif knob == "image_size":
                out[key] = min(v, spec.image_size)
            elif knob == "patch_size" and patches:
                out[key] = min(v, spec.patch_size)
    stage_depth = 2 if spec.layers == "auto" else spec.layers  # 2: alternating blocks (Swin's)
    for knob, keys in per_stage.items():
        for key in keys:
            v = full[key]
            if knob == "width":
                out[key] = _capped(v, width)
            elif knob == "heads":  # every stage's width is a multiple of the first's
                out[key] = [_divisor_at_most(width, min(spec.heads, h)) for h in v]
            elif knob == "image_size":
                out[key] = _capped(v, spec.image_size)
            elif knob == "patch_size" and patches:
                out[key] = _capped(v, spec.patch_size)
            elif knob == "stage_depths":
                out[key] = _capped(v, stage_depth)
    for key in knob_keys["experts_per_tok"]:
        if full[key] is not None or experts:
            out[key] = max(
                1,
                min(
                    full[key] or spec.experts_per_tok, spec.experts_per_tok, experts or spec.experts
                ),
            )
    for key, cap in recipe.cap.items():
        if _is_int(full.get(key)) or _is_int_list(full.get(key)):
            out[key] = _capped(full[key], cap)
    if experts:  # grouped expert matmuls need 16-byte strides: MLP widths a multiple of 8
        for key in knob_keys["intermediate"] + knob_keys["expert_intermediate"]:
            if _is_int(out.get(key)):
                out[key] = -(-out[key] // MOE_WIDTH_MULTIPLE) * MOE_WIDTH_MULTIPLE
    return out


MOE_WIDTH_MULTIPLE = 8
"""torch's grouped matmul, which transformers runs MoE experts with, wants rows of 16 bytes:
8 bfloat16/float16 or 4 float32 values. A spec's odd width is rounded up to it."""


def _is_int_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_int(x) for x in value)


def _capped(value: int | list[int], cap: int) -> int | list[int]:
    return [min(x, cap) for x in value] if isinstance(value, list) else min(value, cap)


def _shrink_rope(merged: dict[str, Any], overrides: dict[str, Any], recipe: Recipe) -> None:
    """Per-dimension RoPE lists must match the new head_dim; per-layer-type dicts stay keyed."""
    rope = merged.get("rope_parameters") or merged.get("rope_scaling")
    if not isinstance(rope, dict):
        return
    # the node's own head count and width, named as the recipe's [knobs] name them
    heads = _first_int(merged, recipe.knobs["heads"])
    width = _first_int(merged, recipe.knobs["width"])
    head_dim = (
        merged.get("head_dim")
        if _is_int(merged.get("head_dim"))
        else (width // heads if width and heads else None)
    )
    if head_dim is None:
        return
    rope = copy.deepcopy(rope)
    for params in [rope, *[v for v in rope.values() if isinstance(v, dict)]]:
        factor = params.get("partial_rotary_factor", merged.get("partial_rotary_factor"))
        rotary_half = int(head_dim * (factor if isinstance(factor, int | float) else 1)) // 2
        for key in ("long_factor", "short_factor"):
            if isinstance(params.get(key), list):
                params[key] = params[key][:rotary_half]
        section = params.get("mrope_section")
        if section is None and params is rope and _reads_mrope(merged.get("model_type")):
            # the model falls back to a full-size section ([16, 24, 24]) when the key is absent
            section = list(MROPE_AXES)
        if isinstance(section, list):
            params["mrope_section"] = _split_like(section, rotary_half)
    overrides["rope_parameters" if "rope_parameters" in merged else "rope_scaling"] = rope


MROPE_AXES = (2, 3, 3)
"""Proportions of the (time, height, width) rotary sections where a config gives none."""


def _reads_mrope(model_type: Any) -> bool:
    """Whether the type's model reads `mrope_section` from its rope parameters (the config class
    tells its rope validation to let that key through)."""
    from transformers import CONFIG_MAPPING

    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return False
    cls = CONFIG_MAPPING[model_type]
    return "mrope_section" in (getattr(cls, "ignore_keys_at_rope_validation", None) or ())


def _rescale_rope_positions(
    full: dict[str, Any], merged: dict[str, Any], overrides: dict[str, Any]
) -> None:
    """Scaled RoPE keeps its ratio when positions shrink: ``original_max_position_embeddings``
    becomes ``positions / factor`` (and positions a multiple of it), or transformers warns on
    every load (8192 original against 512 positions for Llama 3, a YaRN factor mismatch)."""
    key = "max_position_embeddings"
    before, after = full.get(key), merged.get(key)
    rope = merged.get("rope_parameters") or merged.get("rope_scaling")
    if not (isinstance(before, int) and isinstance(after, int) and isinstance(rope, dict)):
        return
    if after >= before:
        return
    rope = overrides.get("rope_parameters", overrides.get("rope_scaling", copy.deepcopy(rope)))
    orig_key = "original_max_position_embeddings"
    top = merged.get(orig_key)  # Phi-3 keeps it beside, not inside, rope_scaling
    for params in [rope, *[v for v in rope.values() if isinstance(v, dict)]]:
        original = params.get(orig_key, top if params is rope else None)
        if not _is_int(original) or original <= 0:
            continue
        factor = params.get("factor")
        if not isinstance(factor, int | float) or factor <= 0:
            factor = params["factor"] = before / original  # what it implied (Phi-3's longrope)
        shrunk = max(1, int(after // factor))
        if orig_key in params:
            params[orig_key] = shrunk
        if _is_int(top):
            overrides[orig_key] = merged[orig_key] = shrunk
        if float(shrunk * factor).is_integer() and 0 < shrunk * factor <= after:
            overrides[key] = merged[key] = int(shrunk * factor)
    overrides["rope_parameters" if "rope_parameters" in merged else "rope_scaling"] = rope


def _first_int(node: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    return next((node[k] for k in keys if _is_int(node.get(k))), None)


def _split_like(parts: list[int], total: int) -> list[int]:
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


_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
}


_CALLS: dict[str, Callable[..., Any]] = {
    "max": max,
    "min": min,
    "len": len,  # a list's length
    # the power of two at or above n (codebooks that must be one, sized to hold a vocabulary)
    "pow2": lambda n: 1 << max(0, int(n) - 1).bit_length(),
}


def _evaluate(expr: str, node: dict[str, Any], where: str) -> Any:
    """Arithmetic over config keys (dotted names reach sub-configs) and numbers; nothing else.
    A float constant makes a float (xLSTM's width factors are typed float)."""

    def ev(n: ast.AST) -> Any:
        if isinstance(n, ast.Constant) and (_is_int(n.value) or isinstance(n.value, float | str)):
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return _OPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.Name):
            return node[n.id]
        if isinstance(n, ast.Subscript):  # an entry of a list key: `subsampling_conv_channels[0]`
            return ev(n.value)[ev(n.slice)]
        if isinstance(n, ast.Attribute):
            return ev(n.value)[n.attr]
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _CALLS:
            return _CALLS[n.func.id](*(ev(a) for a in n.args))
        if isinstance(n, ast.List):  # a per-level list (LW-DETR's projector_in_channels)
            return [ev(e) for e in n.elts]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        raise ValueError(f"unsupported expression element {ast.dump(n)}")

    try:
        return ev(ast.parse(expr, mode="eval").body)
    except (KeyError, ValueError, TypeError, SyntaxError, ZeroDivisionError) as e:
        raise ShrinkConstraintError(
            f"recipe [derive] {where} = {expr!r} cannot be computed: {e!r}. Fix the recipe expression.",
            field=where,
            value=expr,
            constraint="computable expression",
        ) from e


_TOKEN_SUFFIXES = ("_token_id", "_token_ids", "_token_index", "_id_token")


def is_token_key(key: str) -> bool:
    """Keys holding token ids: `*_token_id(s)`, `*_token_index`, suppress lists, `*_to_id` tables."""
    return (
        key.endswith(_TOKEN_SUFFIXES)
        or key.endswith("_to_id")
        or key in ("suppress_tokens", "begin_suppress_tokens")
    )


def remap_token_ids(
    tree: dict[str, Any], vocab: int, token_ids: dict[int, int] | None = None
) -> None:
    """Keep every special-token id < vocab: mapped through `token_ids`, else onto the vocab's top.

    Ids already below `vocab` and absent from `token_ids` keep their value; distinct ids at or
    above it go, in order, to vocab-n .. vocab-1 (where a shrunk tokenizer puts its special tokens).
    """
    mapping = dict(token_ids or {})
    high = sorted({i for i in _token_values(tree) if i >= vocab and i not in mapping})
    mapping.update({old: vocab - len(high) + rank for rank, old in enumerate(high)})

    def walk(node: dict[str, Any]) -> None:
        for key, value in node.items():
            if isinstance(key, str) and is_token_key(key):
                node[key] = _map(value, mapping)
            elif isinstance(value, dict):
                walk(value)

    walk(tree)


def _token_values(tree: dict[str, Any]):
    for key, value in tree.items():
        if isinstance(key, str) and is_token_key(key):
            values = (
                value.values()
                if isinstance(value, dict)
                else value
                if isinstance(value, list)
                else [value]
            )
            yield from (v for v in values if _is_int(v))
        elif isinstance(value, dict):
            yield from _token_values(value)


def _map(value: Any, mapping: dict[int, int]) -> Any:
    if isinstance(value, dict):
        return {k: _map(v, mapping) for k, v in value.items()}
    if isinstance(value, list):
        return [_map(v, mapping) for v in value]
    return mapping.get(value, value) if _is_int(value) else value
