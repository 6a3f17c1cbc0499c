"""Special-token ids in a shrunk config: every one kept inside the tiny vocab."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tinykit._values import is_int

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


def _token_values(tree: dict[str, Any]) -> Iterator[int]:
    for key, value in tree.items():
        if isinstance(key, str) and is_token_key(key):
            values = (
                value.values()
                if isinstance(value, dict)
                else value
                if isinstance(value, list)
                else [value]
            )
            yield from (v for v in values if is_int(v))
        elif isinstance(value, dict):
            yield from _token_values(value)


def _map(value: Any, mapping: dict[int, int]) -> Any:
    if isinstance(value, dict):
        return {k: _map(v, mapping) for k, v in value.items()}
    if isinstance(value, list):
        return [_map(v, mapping) for v in value]
    return mapping.get(value, value) if is_int(value) else value


def named_id_map(tree: dict[str, Any], tiny: dict[str, int], vocab: int) -> dict[int, int]:
    """Source id -> tiny id of each token `tiny` names that the config holds an id of
    (`image_token` -> `image_token_id` or `image_token_index`, in any sub-config). The config's
    other ids past `vocab` keep the places `remap_token_ids` gives them without these tokens."""
    mapping: dict[int, int] = {}
    high: set[int] = set()

    def walk(node: dict[str, Any]) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value)
            elif isinstance(key, str) and is_int(value) and is_token_key(key):
                name = key.removesuffix("_id").removesuffix("_index")
                if name in tiny:
                    mapping[value] = tiny[name]
                elif value >= vocab:
                    high.add(value)

    walk(tree)
    rest = sorted(high - set(mapping))
    mapping.update({old: vocab - len(rest) + rank for rank, old in enumerate(rest)})
    return mapping
