"""Layer plans: which layers of a stack to keep so that every distinct block type survives.

A layer's block type (its signature) is read from the config alone: its entry in every
per-layer list (`layer_types`, ...), whether it is named by an index list (`mlp_only_layers`,
`fullatt_block_indexes`, ...), whether it falls inside a "first k" count
(`first_k_dense_replace`, ...), and what every period field says of it
(`decoder_sparse_step`, `full_attention_interval`, ...). The plan keeps the first layer of
each signature, then rewrites every such field for the new depth so that kept layer j has the
signature of source layer kept[j]. When a period cannot express the kept pattern, the plan
falls back to the shortest prefix of the source that holds every signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tinykit.errors import ShrinkConstraintError


@dataclass(frozen=True)
class LayerPlan:
    """The kept source layer indexes and the rewritten per-layer fields of one stack."""

    depth_key: str
    source_depth: int
    kept: tuple[int, ...]
    fields: dict[str, Any]
    signatures: tuple[tuple[Any, ...], ...]

    @property
    def distinct(self) -> int:
        return len(set(self.signatures))


def _per_layer_lists(node: dict[str, Any], depth: int) -> list[str]:
    return [
        k for k, v in node.items()
        if isinstance(v, list) and depth >= 2 and len(v) == depth
        and all(isinstance(x, str | int | float | bool) or x is None for x in v)
    ]


def _present(node: dict[str, Any], keys: tuple[str, ...], kind: type | tuple[type, ...]) -> list[str]:
    return [k for k in keys if isinstance(node.get(k), kind) and not isinstance(node.get(k), bool)]


def _period(kind: str, i: int, p: int) -> bool:
    if p <= 0:
        return False
    return (i + 1) % p == 0 if kind == "periods_end" else i % p == 0


def plan_layers(
    node: dict[str, Any], depth_key: str, layer_fields: dict[str, tuple[str, ...]],
    layers: int | str, where: str,
) -> LayerPlan:
    """Choose the kept layers of the stack whose depth is `node[depth_key]` and rewrite its fields."""
    depth = node[depth_key]
    lists = _per_layer_lists(node, depth)
    index_lists = _present(node, layer_fields["index_lists"], list)
    prefixes = _present(node, layer_fields["prefix_counts"], int)
    periods = [(kind, k) for kind in ("periods_end", "periods_start")
               for k in _present(node, layer_fields[kind], int)]

    def signature(i: int) -> tuple[Any, ...]:
        return (
            *(node[k][i] for k in lists),
            *(i in node[k] for k in index_lists),
            *(i < node[k] for k in prefixes),
            *(_period(kind, i, node[k]) for kind, k in periods),
        )

    signatures = tuple(signature(i) for i in range(depth))
    first: dict[tuple[Any, ...], int] = {}
    for i, sig in enumerate(signatures):
        first.setdefault(sig, i)
    kept = sorted(first.values())
    if layers == "auto":
        want = max(2, len(kept))
    else:
        if int(layers) < len(kept):
            raise ShrinkConstraintError(
                f"--layers {layers} cannot keep all {len(kept)} block types of {where} "
                f"(first layers of each: {kept}). Use --layers auto or --layers {len(kept)} or more.",
                field="layers", value=layers, constraint=f">= {len(kept)} distinct block types",
            )
        want = int(layers)
    want = min(want, depth)
    kept = sorted([*kept, *[i for i in range(depth) if i not in kept][: want - len(kept)]])

    fields = _rewrite(node, kept, lists, index_lists, prefixes, periods)
    if fields is None:  # a period cannot express the kept pattern: keep the covering prefix
        kept = list(range(max(kept) + 1))
        fields = _rewrite(node, kept, lists, index_lists, prefixes, [])
        assert fields is not None
    fields[depth_key] = len(kept)
    return LayerPlan(depth_key, depth, tuple(kept), fields, signatures)


def _rewrite(node, kept, lists, index_lists, prefixes, periods) -> dict[str, Any] | None:
    fields: dict[str, Any] = {k: [node[k][i] for i in kept] for k in lists}
    for k in index_lists:
        fields[k] = [j for j, i in enumerate(kept) if i in node[k]]
    for k in prefixes:
        fields[k] = sum(1 for i in kept if i < node[k])
    for kind, k in periods:
        want = [_period(kind, i, node[k]) for i in kept]
        choices = [p for p in range(1, len(kept) + 2) if [_period(kind, j, p) for j in range(len(kept))] == want]
        if not choices:
            return None
        fields[k] = node[k] if node[k] in choices else choices[0]
    return fields
