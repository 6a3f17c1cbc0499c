"""The knob rules: the tiny value of every config key a `[knobs]` name of recipes/_generic.toml
covers, as one table (`KNOB_RULES`, one row per knob).

A rule reads the key's source value and the node's shared `Sizes` (its tiny width, heads and
experts, worked out once per node) and returns the tiny value, or None to leave the key as it
is. A key holding one int goes through `one`; a key holding a list of ints through `lists`
(a per-layer list capped entry by entry, or one value per stage of a vision backbone); a knob
without that rule leaves such keys alone. A key named by two knobs takes the later knob's value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tinykit._values import is_int
from tinykit.model.recipes import Recipe
from tinykit.model.shrink.values import capped, is_int_list
from tinykit.model.spec import ShrinkSpec


@dataclass(frozen=True)
class Sizes:
    """What the rules of one node share."""

    spec: ShrinkSpec
    vocab: int | None  # the tiny vocab; None keeps the source's (faithful mode)
    width: int
    heads: int
    source_heads: int | None  # the node's first head count, before shrinking
    experts: int | None  # the tiny count of routed experts, where the node has experts
    patches: bool  # the node reads images in patches (so its patch size shrinks)
    stage_depth: int  # blocks per stage of a vision backbone


Rule = Callable[[Any, Sizes], Any]


@dataclass(frozen=True)
class KnobRule:
    one: Rule | None = None
    """For a key holding one int."""
    lists: Rule | None = None
    """For a key holding a non-empty list of ints."""
    fills_none: bool = False
    """A key the class leaves None gets `one` too: the model cannot be built without a value."""


def _capped_at(field: str) -> KnobRule:
    """At most the spec's `field`, a list entry by entry."""

    def rule(value: Any, s: Sizes) -> Any:
        return capped(value, getattr(s.spec, field))

    return KnobRule(rule, lists=rule)


def _at_most(field: str) -> KnobRule:
    return KnobRule(lambda v, s: min(v, getattr(s.spec, field)))


def _kv_heads(value: int | None, s: Sizes) -> int:
    """`heads` where the source has as many kv heads as heads (or none), else fewer that divide it."""
    if value is None or s.source_heads is not None and value >= s.source_heads:
        return s.heads
    return _divisor_at_most(s.heads, min(value, s.spec.kv_heads), even_quotient=False)


def _experts(value: int, spec: ShrinkSpec) -> int:
    return min(value, spec.experts) if value >= 2 else value


def _experts_per_tok(value: int | None, s: Sizes) -> int | None:
    if value is None and not s.experts:
        return None
    spec = s.spec
    return max(
        1, min(value or spec.experts_per_tok, spec.experts_per_tok, s.experts or spec.experts)
    )


def _patch_size(value: Any, s: Sizes) -> Any:
    return capped(value, s.spec.patch_size) if s.patches else None


KNOB_RULES: dict[str, KnobRule] = {
    # a width of 0 means "none" (DPR's projection_dim: no projection) and stays 0
    "width": KnobRule(lambda v, s: s.width if v > 0 else v, lists=lambda v, s: capped(v, s.width)),
    # every stage's width is a multiple of the first's
    "heads": KnobRule(
        lambda v, s: s.heads,
        lists=lambda v, s: [_divisor_at_most(s.width, min(s.spec.heads, h)) for h in v],
    ),
    "kv_heads": KnobRule(_kv_heads, fills_none=True),
    "head_dim": KnobRule(lambda v, s: s.width // s.heads, fills_none=True),
    "intermediate": _capped_at("intermediate"),
    "expert_intermediate": _capped_at("expert_intermediate"),
    "layers": KnobRule(),  # planned with every block type kept (nodes.py, model/layers.py)
    "other_layers": KnobRule(),  # follow the main stack's planned depth (nodes.py)
    "vocab": KnobRule(lambda v, s: s.vocab, fills_none=True),
    "positions": _at_most("max_positions"),
    "experts": KnobRule(lambda v, s: _experts(v, s.spec)),
    "experts_per_tok": KnobRule(_experts_per_tok, fills_none=True),
    "at_most_one": KnobRule(lambda v, s: min(v, 1)),
    "channels": _capped_at("hidden"),
    "window": _at_most("window"),
    # (an int depth is a `layers` key)
    "stage_depths": KnobRule(lists=lambda v, s: capped(v, s.stage_depth)),
    "image_size": _capped_at("image_size"),
    "patch_size": KnobRule(_patch_size, lists=_patch_size),
}


PATCH_MERGING = ("spatial_merge_size", "temporal_patch_size", "merge_size", "patch_temporal")
"""Keys of towers that read flattened patches (Qwen2-VL's): any patch size fits their input."""


MOE_WIDTH_MULTIPLE = 8
"""torch's grouped matmul, which transformers runs MoE experts with, wants rows of 16 bytes:
8 bfloat16/float16 or 4 float32 values. A spec's odd width is rounded up to it."""


def knob_values(
    full: dict[str, Any], recipe: Recipe, spec: ShrinkSpec, vocab: int | None
) -> dict[str, Any]:
    """The tiny value of every key of `full` that a knob, or a recipe `[cap]`, names."""
    sizes = _sizes(full, recipe, spec, vocab)
    out: dict[str, Any] = {}
    for knob, keys in recipe.knobs.items():
        for key in keys:
            rule = _rule_for(KNOB_RULES[knob], key, full)
            tiny = rule(full.get(key), sizes) if rule else None
            if tiny is not None:
                out[key] = tiny
    for key, cap in recipe.cap.items():
        if is_int(full.get(key)) or is_int_list(full.get(key)):
            out[key] = capped(full[key], cap)
    if sizes.experts:
        _round_up_moe_widths(out, recipe)
    return out


def _round_up_moe_widths(out: dict[str, Any], recipe: Recipe) -> None:
    """Grouped expert matmuls need 16-byte strides: MLP widths become a multiple of 8."""
    for key in recipe.knobs["intermediate"] + recipe.knobs["expert_intermediate"]:
        if is_int(out.get(key)):
            out[key] = -(-out[key] // MOE_WIDTH_MULTIPLE) * MOE_WIDTH_MULTIPLE


def _rule_for(knob: KnobRule, key: str, full: dict[str, Any]) -> Rule | None:
    """The knob's rule for the key's value (an int, None, or a list of ints), if it has one."""
    value = full.get(key)
    if is_int(value) or (knob.fills_none and value is None and key in full):
        return knob.one
    return knob.lists if is_int_list(value) else None


def _sizes(full: dict[str, Any], recipe: Recipe, spec: ShrinkSpec, vocab: int | None) -> Sizes:
    def ints(knob: str) -> list[int]:
        return [full[k] for k in recipe.knobs[knob] if is_int(full.get(k))]

    width = min([w for w in ints("width") if w > 0] + [spec.hidden])
    source_heads = next(iter(ints("heads")), None)
    experts = ints("experts")
    return Sizes(
        spec=spec,
        vocab=vocab,
        width=width,
        heads=_divisor_at_most(width, min(spec.heads, source_heads or spec.heads)),
        source_heads=source_heads,
        experts=_experts(experts[-1], spec) if experts else None,  # the last key's, as set
        patches=any(
            is_int(full.get(k)) or is_int_list(full.get(k)) for k in recipe.knobs["image_size"]
        )
        or any(is_int(full.get(k)) for k in PATCH_MERGING),
        stage_depth=2 if spec.layers == "auto" else spec.layers,  # 2: alternating blocks (Swin's)
    )


def _divisor_at_most(n: int, limit: int, even_quotient: bool = True) -> int:
    """The largest d <= limit dividing n (with n/d even when asked), at least 1."""
    for d in range(max(1, min(n, limit)), 0, -1):
        if n % d == 0 and (not even_quotient or (n // d) % 2 == 0):
            return d
    return 1
