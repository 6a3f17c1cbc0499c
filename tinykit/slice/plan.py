"""The plan of a slice: which layers of every stack are kept, and what each kept tensor is called.

The config's stacks are planned with make-tiny's layer planner (`plan_layers`): a count keeps
the first N layers of every stack, explicit indexes keep exactly those, `auto` the first layer
of every block type; every per-layer field is rewritten in lockstep. Weight names are matched
to the stacks by depth (and, between stacks of one depth, by the words of their config key),
then the kept layers are renumbered 0..k-1.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tinykit._values import is_int
from tinykit.errors import ShrinkConstraintError, UnsupportedModelError, UsageError
from tinykit.model.layers import plan_layers
from tinykit.slice.weights import TensorEntry

# A layer-stack tensor: `<prefix>.<index>.<rest>`, the prefix ending in a stack name.
LAYER_KEY = re.compile(r"^(?P<prefix>(?:[^.]+\.)*?(?:layers|layer|h|blocks|block))\.(?P<i>\d+)\.")
# Words that tie a config stack to its weights when two stacks have the same depth.
_HINTS = {
    "text": ("text", "language"),
    "vision": ("vision", "visual"),
    "audio": ("audio",),
    "encoder": ("encoder",),
    "decoder": ("decoder",),
}


@dataclass(frozen=True)
class Stack:
    """One layer stack of the config: where it is, its depth and the source layers kept."""

    path: str  # "" for the top config, "text_config." for a nested one
    depth_key: str
    depth: int
    kept: tuple[int, ...]
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def hints(self) -> set[str]:
        words = re.split(r"[._]", f"{self.path}{self.depth_key}")
        return {h for w in words for h in _HINTS.get(w, ())}


def parse_layers(layers: int | str | Sequence[int]) -> int | str | tuple[int, ...]:
    """`2`, `"2"`, `"auto"`, `"0,5,11"` or `[0, 5, 11]` as a count, "auto" or an index tuple."""
    if isinstance(layers, int) and not isinstance(layers, bool):
        if layers < 1:
            raise UsageError(f"--layers {layers}: keep at least 1 layer. Use 1 or more, or auto.")
        return layers
    if isinstance(layers, str):
        return _parse_layers_text(layers)
    if isinstance(layers, bool):
        raise UsageError(f"--layers {layers!r} is not a count. Pass a number, auto, or indexes.")
    return tuple(int(x) for x in layers)


def _parse_layers_text(layers: str) -> int | str | tuple[int, ...]:
    text = layers.strip()
    if text == "auto":
        return text
    if text.isdigit():
        return parse_layers(int(text))
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UsageError(
            f"--layers {layers!r} is not a count, auto, or comma-separated layer indexes "
            "(e.g. 2, auto, 0,5,11). Pass one of those."
        ) from None


def plan_stacks(
    raw: dict[str, Any], layers: int | str | tuple[int, ...]
) -> tuple[dict, list[Stack]]:
    """The sliced config.json dict and the plan of every layer stack in it (nested ones too)."""
    from tinykit.model.config import load_config
    from tinykit.model.recipes import recipe_for

    full = load_config(raw).to_dict()
    out = copy.deepcopy(raw)
    stacks: list[Stack] = []

    def walk(node: dict[str, Any], target: dict[str, Any], path: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict) and "model_type" in value:
                sub = target.get(key)
                if not isinstance(sub, dict):  # the class made a default sub-config
                    sub = target[key] = {"model_type": value["model_type"]}
                walk(value, sub, f"{path}{key}.")
        recipe = recipe_for(node.get("model_type") or "")
        keys = [k for k in recipe.knobs["layers"] if is_int(node.get(k))]
        if not keys:
            return
        where = f"'{path.rstrip('.') or node.get('model_type')}'"
        if isinstance(layers, int) and layers > node[keys[0]]:
            raise ShrinkConstraintError(
                f"--layers {layers} is more than the {node[keys[0]]} layers of {where}. "
                f"Use {node[keys[0]]} or fewer.",
                field="layers",
                value=layers,
                constraint=f"<= {node[keys[0]]}",
            )
        # A count keeps the first N layers; explicit indexes and auto go to the planner.
        plan_arg = tuple(range(layers)) if isinstance(layers, int) else layers
        plan = plan_layers(node, keys[0], recipe.layer_fields, plan_arg, where)
        target.update(plan.fields)
        stacks.append(Stack(path, keys[0], plan.source_depth, plan.kept, plan.fields))
        for other in recipe.knobs["other_layers"]:  # decoders of encoder-decoders
            if is_int(node.get(other)):
                depth = node[other]
                kept = _other_kept(layers, len(plan.kept), depth, f"'{path}{other}'")
                target[other] = len(kept)
                stacks.append(Stack(path, other, depth, kept, {other: len(kept)}))

    walk(full, out, "")
    return out, stacks


def _other_kept(layers: Any, count: int, depth: int, where: str) -> tuple[int, ...]:
    if isinstance(layers, tuple):
        bad = [i for i in layers if not 0 <= i < depth]
        if bad:
            raise ShrinkConstraintError(
                f"--layers names layer(s) {bad}, but {where} has layers 0..{depth - 1}. "
                f"Pick indexes below {depth}.",
                field="layers",
                value=layers,
                constraint=f"0 <= index < {depth}",
            )
        return tuple(sorted(set(layers)))
    if isinstance(layers, int) and layers > depth:
        raise ShrinkConstraintError(
            f"--layers {layers} is more than the {depth} layers of {where}. Use {depth} or fewer.",
            field="layers",
            value=layers,
            constraint=f"<= {depth}",
        )
    return tuple(range(min(count, depth)))


def map_tensors(
    entries: list[TensorEntry], stacks: list[Stack]
) -> tuple[list[tuple[str, TensorEntry]], dict[str, list[int]]]:
    """(output name, entry) of every kept tensor, and weight prefix -> kept source layers."""
    layer_map = _layer_map(_layer_groups(entries), stacks)
    return _renamed(entries, layer_map), layer_map


def _layer_groups(entries: list[TensorEntry]) -> dict[str, set[int]]:
    """Weight prefix -> the layer indexes its tensors carry."""
    groups: dict[str, set[int]] = {}
    for e in entries:
        if m := LAYER_KEY.match(e.name):
            groups.setdefault(m["prefix"], set()).add(int(m["i"]))
    return groups


def _layer_map(groups: dict[str, set[int]], stacks: list[Stack]) -> dict[str, list[int]]:
    """Weight prefix -> the source layers its config stack keeps; every stack must be matched."""
    layer_map: dict[str, list[int]] = {}
    matched: set[int] = set()
    for prefix, indexes in groups.items():
        candidates = _stacks_of(prefix, max(indexes) + 1, stacks)
        if not candidates:
            continue  # not a config stack (an MTP head, a conv list): copied whole
        layer_map[prefix] = list(candidates[0].kept)
        matched.update(id(s) for s in candidates)
    missing = [s for s in stacks if id(s) not in matched]
    if missing:
        raise UnsupportedModelError(
            f"no weights look like the layers of {', '.join(s.path + s.depth_key for s in missing)} "
            f"(depth {missing[0].depth}): tinykit finds layers named <prefix>.layers.N. (or "
            ".layer/.h/.blocks/.block). This checkpoint names them otherwise; use make-tiny."
        )
    return layer_map


def _stacks_of(prefix: str, depth: int, stacks: list[Stack]) -> list[Stack]:
    """The config stacks the weights under `prefix` belong to: those of their depth, narrowed
    by the prefix's words where they keep different layers (which must then agree)."""
    candidates = [s for s in stacks if s.depth == depth]
    if not _keep_alike(candidates):
        words = set(re.split(r"[._]", prefix))
        candidates = [s for s in candidates if s.hints & words] or candidates
    if not _keep_alike(candidates):
        raise UnsupportedModelError(
            f"weights {prefix}.N.* ({depth} layers) match several config stacks "
            f"({', '.join(s.path + s.depth_key for s in candidates)}) with different kept "
            "layers. Pass explicit --layers indexes or a count, which slice every stack alike."
        )
    return candidates


def _keep_alike(stacks: list[Stack]) -> bool:
    return len({s.kept for s in stacks}) <= 1


def _renamed(
    entries: list[TensorEntry], layer_map: dict[str, list[int]]
) -> list[tuple[str, TensorEntry]]:
    """(output name, entry) of every kept tensor: a kept layer renumbered 0..k-1 in its stack."""
    kept: list[tuple[str, TensorEntry]] = []
    for e in entries:
        m = LAYER_KEY.match(e.name)
        if m is None or m["prefix"] not in layer_map:
            kept.append((e.name, e))
            continue
        order = layer_map[m["prefix"]]
        if int(m["i"]) in order:
            new = f"{m['prefix']}.{order.index(int(m['i']))}.{e.name[m.end() :]}"
            kept.append((new, e))
    return kept
