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

import json
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
    keyed: tuple[str, ...] = ()
    """Per-layer override dicts (`per_layer_config`): their values are shrunk like the node's."""

    @property
    def distinct(self) -> int:
        return len(set(self.signatures))


def _per_layer_lists(node: dict[str, Any], depth: int) -> list[str]:
    return [
        k
        for k, v in node.items()
        if isinstance(v, list)
        and depth >= 2
        and len(v) == depth
        and all(isinstance(x, str | int | float | bool) or x is None for x in v)
    ]


def _present(
    node: dict[str, Any], keys: tuple[str, ...], kind: type | tuple[type, ...]
) -> list[str]:
    return [k for k in keys if isinstance(node.get(k), kind) and not isinstance(node.get(k), bool)]


def _period(kind: str, i: int, p: int) -> bool:
    if p <= 0:
        return False
    return (i + 1) % p == 0 if kind == "periods_end" else i % p == 0


def plan_layers(
    node: dict[str, Any],
    depth_key: str,
    layer_fields: dict[str, tuple[Any, ...]],
    layers: int | str | tuple[int, ...],
    where: str,
) -> LayerPlan:
    """Choose the kept layers of the stack whose depth is `node[depth_key]` and rewrite its fields.

    `layers` is a count (keep every block type, then fill up to it), "auto" (one layer of
    each block type, at least 2), or a tuple of source indexes, kept exactly (`slice`).
    """
    depth = node[depth_key]
    index_lists = _present(node, layer_fields["index_lists"], list)
    # an index list as long as the stack (LFM2's full_attn_idxs = every layer) is no per-layer list
    # per-layer lists of the layer each one reads from (Mistral Large 4's kv_source_layers)
    sources = [
        k
        for k in _present(node, layer_fields.get("source_index_lists", ()), list)
        if len(node[k]) == depth
    ]
    lists = [k for k in _per_layer_lists(node, depth) if k not in index_lists + sources]
    prefixes = _present(node, layer_fields["prefix_counts"], int)
    suffixes = _present(node, layer_fields["suffix_counts"], int)
    periods: list[tuple[str, Any]] = [  # (kind, key), or ("offset", (period key, offset key))
        (kind, k)
        for kind in ("periods_end", "periods_start")
        for k in _present(node, layer_fields[kind], int)
    ]
    periods += [
        ("offset", (p, o))
        for p, o in layer_fields["period_offsets"]
        if _is_int(node.get(p)) and _is_int(node.get(o)) and node[p] > 0
    ]
    cyclic = [
        k for k in _present(node, layer_fields["cyclic_lists"], list) if k not in lists and node[k]
    ]
    keyed = _layer_keyed_dicts(node, depth)

    def signature(i: int) -> tuple[Any, ...]:
        return (
            *(node[k][i] for k in lists),
            *(node[k][i % len(node[k])] for k in cyclic),
            *(json.dumps(_at(node[k], i), sort_keys=True) for k in keyed),
            *(i in node[k] for k in index_lists),
            *(i < node[k] for k in prefixes),
            *(i >= depth - node[k] for k in suffixes),
            *(_predicate(node, kind, k, i) for kind, k in periods),
            *(_source_role(node[k], i) for k in sources),
        )

    signatures = tuple(signature(i) for i in range(depth))
    first: dict[tuple[Any, ...], int] = {}
    for i, sig in enumerate(signatures):
        first.setdefault(sig, i)
    kept = sorted(first.values())
    if isinstance(layers, tuple):
        kept = _explicit(layers, depth, where)
        explicit = _rewrite(node, kept, periods)
        if explicit is None:
            raise ShrinkConstraintError(
                f"--layers {','.join(map(str, kept))} of {where}: its period fields "
                f"({', '.join(str(k) for _, k in periods)}) cannot express that pattern of "
                "block types. Pick layers that keep the period, or use --layers auto.",
                field="layers",
                value=layers,
                constraint="expressible by the period fields",
            )
        fields = explicit
    else:
        if layers == "auto":
            want = max(2, len(kept))
        else:
            if int(layers) < len(kept):
                raise ShrinkConstraintError(
                    f"--layers {layers} cannot keep all {len(kept)} block types of {where} "
                    f"(first layers of each: {kept}). Use --layers auto or --layers {len(kept)} or more.",
                    field="layers",
                    value=layers,
                    constraint=f">= {len(kept)} distinct block types",
                )
            want = int(layers)
        want = min(want, depth)
        kept = sorted([*kept, *[i for i in range(depth) if i not in kept][: want - len(kept)]])
        kept = sorted({*kept, *(node[k][i] for k in sources for i in kept)})  # sources stay

        planned = _rewrite(node, kept, periods)
        if planned is None:  # a period cannot express the kept pattern: keep the covering prefix
            kept = list(range(max(kept) + 1))
            planned = _rewrite(node, kept, [])
            assert planned is not None
        fields = planned
    fields.update({k: [node[k][i] for i in kept] for k in lists})
    fields.update({k: [node[k][i % len(node[k])] for i in kept] for k in cyclic})
    fields.update(
        {
            k: {
                type(next(iter(node[k])))(j): _at(node[k], i)
                for j, i in enumerate(kept)
                if _at(node[k], i) is not None
            }
            for k in keyed
        }
    )
    fields.update({k: [j for j, i in enumerate(kept) if i in node[k]] for k in index_lists})
    fields.update({k: [kept.index(node[k][i]) for i in kept] for k in sources})
    fields.update({k: sum(1 for i in kept if i < node[k]) for k in prefixes})
    fields.update({k: sum(1 for i in kept if i >= depth - node[k]) for k in suffixes})
    fields[depth_key] = len(kept)
    return LayerPlan(depth_key, depth, tuple(kept), fields, signatures, tuple(keyed))


def _explicit(layers: tuple[int, ...], depth: int, where: str) -> list[int]:
    kept = sorted(set(layers))
    bad = [i for i in kept if not 0 <= i < depth]
    if bad or not kept:
        raise ShrinkConstraintError(
            f"--layers {','.join(map(str, layers))} names layer(s) {bad or 'none'}, but {where} "
            f"has layers 0..{depth - 1}. Pick indexes below {depth}, or a count of at most {depth}.",
            field="layers",
            value=layers,
            constraint=f"0 <= index < {depth}",
        )
    return kept


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _layer_keyed_dicts(node: dict[str, Any], depth: int) -> list[str]:
    """Dicts keyed by layer index (`per_layer_config = {"5": {...}}`): per-layer overrides."""
    return [
        k
        for k, v in node.items()
        if isinstance(v, dict)
        and v
        and all(str(x).isdigit() and int(x) < depth and isinstance(y, dict) for x, y in v.items())
    ]


def _source_role(sources: list[Any], i: int) -> tuple[bool, bool]:
    """Of a layer that reads from layer sources[i]: whether it computes its own (a KV cache),
    and whether later layers read it."""
    return sources[i] == i, any(s == i for j, s in enumerate(sources) if j != i)


def _at(table: dict[Any, Any], i: int) -> Any:
    """The entry of layer i; keys may be zero-padded strings (EmbeddingGemma 2's "05")."""
    return next((v for k, v in table.items() if int(k) == i), None)


def _predicate(node: dict[str, Any], kind: str, key: Any, i: int) -> bool:
    if kind == "offset":
        return i % node[key[0]] == node[key[1]]
    return _period(kind, i, node[key])


def _rewrite(
    node: dict[str, Any], kept: list[int], periods: list[tuple[str, Any]]
) -> dict[str, Any] | None:
    """New values for the period fields so that kept layer j keeps its source predicate, if any exist."""
    fields: dict[str, Any] = {}
    n = len(kept)
    for kind, key in periods:
        want = [_predicate(node, kind, key, i) for i in kept]
        if kind == "offset":
            pairs = [
                (p, o)
                for p in range(1, n + 2)
                for o in range(p)
                if [j % p == o for j in range(n)] == want
            ]
            if not pairs:
                return None
            fields[key[0]], fields[key[1]] = pairs[0]
            continue
        choices = [p for p in range(1, n + 2) if [_period(kind, j, p) for j in range(n)] == want]
        if not choices:
            return None
        fields[key] = node[key] if node[key] in choices else choices[0]
    return fields
