"""What the shrink rules read a config value as: an int (never a bool) or a list of ints."""

from __future__ import annotations

from typing import Any

from tinykit._values import is_int


def is_int_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(is_int(x) for x in value)


def first_int(node: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    """The value of the first of `keys` that holds an int in `node`."""
    return next((node[k] for k in keys if is_int(node.get(k))), None)


def capped(value: int | list[int], cap: int) -> int | list[int]:
    """`value` at most `cap`; a list entry by entry."""
    return [min(x, cap) for x in value] if isinstance(value, list) else min(value, cap)
