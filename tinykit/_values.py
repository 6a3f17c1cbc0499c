"""Checks of config and processor values shared by every room: an int setting is never a bool
(`True` is an `int` to Python, never a size to a config)."""

from __future__ import annotations

from typing import Any, TypeGuard


def is_int(value: Any) -> TypeGuard[int]:
    """Whether `value` is an int and not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)
