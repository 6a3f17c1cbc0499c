"""Layer plans: which layers of a stack to keep so that every distinct block type survives.

A layer's block type (its signature) is read from the config alone: its entry in every
per-layer list (`layer_types`, ...), whether it is named by an index list (`mlp_only_layers`,
`fullatt_block_indexes`, ...), whether it falls inside a "first k" count
(`first_k_dense_replace`, ...), and what every period field says of it
(`decoder_sparse_step`, `full_attention_interval`, ...). The plan keeps the first layer of
each signature, then rewrites every such field for the new depth so that kept layer j has the
signature of source layer kept[j]. When a period cannot express the kept pattern, the plan
falls back to the shortest prefix of the source that holds every signature.

Each kind of field is one row of a table: `FIELD_KINDS` (how a key is found, what it says of a
layer, its value for the kept layers) and `PERIOD_KINDS` (the pattern fields, rewritten jointly).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tinykit._values import is_int
from tinykit.errors import ShrinkConstraintError

LayerFields = dict[str, tuple[Any, ...]]  # a recipe's [layer_fields]


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


@dataclass(frozen=True)
class _FieldKind:
    """One kind of per-layer field: the keys of a node it covers, what a key's value says of
    layer i (its part of the layer's signature), and the value rewritten for the kept layers."""

    find: Callable[[dict[str, Any], int, LayerFields], list[str]]  # (node, depth, [layer_fields])
    says: Callable[[Any, int, int], Any]  # (value, layer, depth)
    kept: Callable[[Any, list[int], int], Any]  # (value, kept layers, depth)


def _present(
    node: dict[str, Any], keys: tuple[str, ...], kind: type | tuple[type, ...]
) -> list[str]:
    return [k for k in keys if isinstance(node.get(k), kind) and not isinstance(node.get(k), bool)]


def _named(name: str, kind: type) -> Callable[[dict[str, Any], int, LayerFields], list[str]]:
    """The keys `[layer_fields]` lists under `name`, where the node holds a `kind`."""
    return lambda node, depth, fields: _present(node, fields.get(name, ()), kind)


def _per_layer_lists(node: dict[str, Any], depth: int, fields: LayerFields) -> list[str]:
    """Any list as long as the stack, of plain values (`layer_types`). An index list as long as
    the stack (LFM2's full_attn_idxs = every layer) is no per-layer list, nor a sources list."""
    named = (*fields["index_lists"], *fields.get("source_index_lists", ()))
    return [
        k
        for k, v in node.items()
        if isinstance(v, list)
        and depth >= 2
        and len(v) == depth
        and all(isinstance(x, str | int | float | bool) or x is None for x in v)
        and k not in named
    ]


def _cyclic_lists(node: dict[str, Any], depth: int, fields: LayerFields) -> list[str]:
    """Patterns repeated over the depth, where not as long as the stack (then a per-layer list)."""
    lists = _per_layer_lists(node, depth, fields)
    return [k for k in _present(node, fields["cyclic_lists"], list) if k not in lists and node[k]]


def _source_lists(node: dict[str, Any], depth: int, fields: LayerFields) -> list[str]:
    named = fields.get("source_index_lists", ())
    return [k for k in _present(node, named, list) if len(node[k]) == depth]


def _layer_keyed_dicts(node: dict[str, Any], depth: int, fields: LayerFields) -> list[str]:
    """Dicts keyed by layer index (`per_layer_config = {"5": {...}}`): per-layer overrides."""
    return [
        k
        for k, v in node.items()
        if isinstance(v, dict)
        and v
        and all(str(x).isdigit() and int(x) < depth and isinstance(y, dict) for x, y in v.items())
    ]


def _at(table: dict[Any, Any], i: int) -> Any:
    """The entry of layer i; keys may be zero-padded strings (EmbeddingGemma 2's "05")."""
    return next((v for k, v in table.items() if int(k) == i), None)


def _keyed_kept(table: dict[Any, Any], kept: list[int], depth: int) -> dict[Any, Any]:
    key_type = type(next(iter(table)))
    return {key_type(j): _at(table, i) for j, i in enumerate(kept) if _at(table, i) is not None}


def _source_role(sources: list[Any], i: int) -> tuple[bool, bool]:
    """Of a layer that reads from layer sources[i]: whether it computes its own (a KV cache),
    and whether later layers read it."""
    return sources[i] == i, any(s == i for j, s in enumerate(sources) if j != i)


FIELD_KINDS: dict[str, _FieldKind] = {
    "per_layer_lists": _FieldKind(
        _per_layer_lists, lambda v, i, d: v[i], lambda v, kept, d: [v[i] for i in kept]
    ),
    "cyclic_lists": _FieldKind(
        _cyclic_lists,
        lambda v, i, d: v[i % len(v)],
        lambda v, kept, d: [v[i % len(v)] for i in kept],
    ),
    "keyed_dicts": _FieldKind(
        _layer_keyed_dicts, lambda v, i, d: json.dumps(_at(v, i), sort_keys=True), _keyed_kept
    ),
    "index_lists": _FieldKind(
        _named("index_lists", list),
        lambda v, i, d: i in v,
        lambda v, kept, d: [j for j, i in enumerate(kept) if i in v],
    ),
    "source_index_lists": _FieldKind(
        _source_lists,
        lambda v, i, d: _source_role(v, i),
        lambda v, kept, d: [kept.index(v[i]) for i in kept],
    ),
    "prefix_counts": _FieldKind(
        _named("prefix_counts", int),
        lambda v, i, d: i < v,
        lambda v, kept, d: sum(1 for i in kept if i < v),
    ),
    "suffix_counts": _FieldKind(
        _named("suffix_counts", int),
        lambda v, i, d: i >= d - v,
        lambda v, kept, d: sum(1 for i in kept if i >= d - v),
    ),
}
"""Per-layer fields, rewritten in this order: the index and count rows cover the keys that
`[layer_fields]` lists under their name, the others are found by their shape."""


@dataclass(frozen=True)
class _PeriodKind:
    """A pattern field (or pair of fields) that says of layer i whether it is special. The plan
    rewrites it with the first candidate values that say the same of the kept layers."""

    says: Callable[[int, tuple[int, ...]], bool]  # (layer, the field values)
    candidates: Callable[[int], Iterator[tuple[int, ...]]]  # for n kept layers
    keeps_source: bool  # the source's values win where they still fit


def _periods(n: int) -> Iterator[tuple[int, ...]]:
    return ((p,) for p in range(1, n + 2))


PERIOD_KINDS: dict[str, _PeriodKind] = {
    # layer i is special when (i + 1) % p == 0
    "periods_end": _PeriodKind(lambda i, v: v[0] > 0 and (i + 1) % v[0] == 0, _periods, True),
    # layer i is special when i % p == 0
    "periods_start": _PeriodKind(lambda i, v: v[0] > 0 and i % v[0] == 0, _periods, True),
    # (period, offset) pairs: layer i is special when i % period == offset
    "period_offsets": _PeriodKind(
        lambda i, v: i % v[0] == v[1],
        lambda n: ((p, o) for p in range(1, n + 2) for o in range(p)),
        False,
    ),
}

Period = tuple[str, str | tuple[str, ...]]  # (kind, key), or (kind, (period key, offset key))


def _find_periods(node: dict[str, Any], fields: LayerFields) -> list[Period]:
    found: list[Period] = [
        (kind, k)
        for kind in ("periods_end", "periods_start")
        for k in _present(node, fields[kind], int)
    ]
    return found + [
        ("period_offsets", (p, o))
        for p, o in fields["period_offsets"]
        if is_int(node.get(p)) and is_int(node.get(o)) and node[p] > 0
    ]


def _values(node: dict[str, Any], key: str | tuple[str, ...]) -> tuple[int, ...]:
    return (node[key],) if isinstance(key, str) else tuple(node[k] for k in key)


def _says(node: dict[str, Any], period: Period, i: int) -> bool:
    kind, key = period
    return PERIOD_KINDS[kind].says(i, _values(node, key))


def plan_layers(
    node: dict[str, Any],
    depth_key: str,
    layer_fields: LayerFields,
    layers: int | str | tuple[int, ...],
    where: str,
) -> LayerPlan:
    """Choose the kept layers of the stack whose depth is `node[depth_key]` and rewrite its fields.

    `layers` is a count (keep every block type, then fill up to it), "auto" (one layer of
    each block type, at least 2), or a tuple of source indexes, kept exactly (`slice`).
    """
    depth = node[depth_key]
    found = {name: kind.find(node, depth, layer_fields) for name, kind in FIELD_KINDS.items()}
    periods = _find_periods(node, layer_fields)

    def signature(i: int) -> tuple[Any, ...]:
        return (
            *(
                kind.says(node[k], i, depth)
                for name, kind in FIELD_KINDS.items()
                for k in found[name]
            ),
            *(_says(node, period, i) for period in periods),
        )

    signatures = tuple(signature(i) for i in range(depth))
    first: dict[tuple[Any, ...], int] = {}
    for i, sig in enumerate(signatures):
        first.setdefault(sig, i)
    if isinstance(layers, tuple):
        kept = _explicit(layers, depth, where)
        fields = _rewrite(node, kept, periods)
        if fields is None:
            raise ShrinkConstraintError(
                f"--layers {','.join(map(str, kept))} of {where}: its period fields "
                f"({', '.join(str(k) for _, k in periods)}) cannot express that pattern of "
                "block types. Pick layers that keep the period, or use --layers auto.",
                field="layers",
                value=layers,
                constraint="expressible by the period fields",
            )
    else:
        sources = [node[k] for k in found["source_index_lists"]]
        kept, fields = _by_count(
            node, depth, layers, sorted(first.values()), sources, periods, where
        )
    for name, kind in FIELD_KINDS.items():
        fields.update({k: kind.kept(node[k], kept, depth) for k in found[name]})
    fields[depth_key] = len(kept)
    return LayerPlan(depth_key, depth, tuple(kept), fields, signatures, tuple(found["keyed_dicts"]))


def _by_count(
    node: dict[str, Any],
    depth: int,
    layers: int | str,
    kept: list[int],
    sources: list[list[Any]],
    periods: list[Period],
    where: str,
) -> tuple[list[int], dict[str, Any]]:
    """The kept layers for a count or "auto" (`kept` holds the first layer of each block type),
    and the rewritten period fields."""
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
    kept = sorted({*kept, *(source[i] for source in sources for i in kept)})  # sources stay
    planned = _rewrite(node, kept, periods)
    if planned is None:  # a period cannot express the kept pattern: keep the covering prefix
        kept = list(range(max(kept) + 1))
        planned = {}
    return kept, planned


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


def _rewrite(node: dict[str, Any], kept: list[int], periods: list[Period]) -> dict[str, Any] | None:
    """New values for the period fields so that kept layer j keeps its source pattern, if any exist."""
    fields: dict[str, Any] = {}
    n = len(kept)
    for kind, key in periods:
        rule = PERIOD_KINDS[kind]
        want = [_says(node, (kind, key), i) for i in kept]
        fits = [v for v in rule.candidates(n) if [rule.says(j, v) for j in range(n)] == want]
        if not fits:
            return None
        source = _values(node, key)
        chosen = source if rule.keeps_source and source in fits else fits[0]
        fields.update(zip((key,) if isinstance(key, str) else key, chosen, strict=True))
    return fields
