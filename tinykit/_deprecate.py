"""Old call forms kept for one release: they still work, with a DeprecationWarning naming the new one.

@old_positions("model", "modules", "what")   # the parameters as they were once positional
def record(model, *, modules="*", what=...): ...

record(model, "lm_head")   # works, warns: write record(model, modules=...)
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def old_positions(
    *order: str, is_old: Callable[[tuple[Any, ...], dict[str, Any]], bool] | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Also accept the calls that passed the parameters `order` (all of them, from the first) by
    position. A call is in the old form when it passes more positional arguments than the new
    signature takes, or when `is_old(args, kwargs)` says so (for a parameter that moved). Its
    arguments are bound by name, a DeprecationWarning names the new form, and the function runs
    as if it had been called that way. A new-form call costs one length test."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        params = inspect.signature(fn).parameters.values()
        positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        by_name: Callable[..., R] = fn  # the old form's arguments, bound by name

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            if len(args) > len(positional) or (is_old is not None and is_old(args, kwargs)):
                if len(args) > len(order):
                    raise TypeError(
                        f"{fn.__name__}() takes at most {len(order)} positional arguments "
                        f"({len(args)} given)"
                    )
                named = dict(zip(order, args, strict=False))
                twice = sorted(named.keys() & kwargs.keys())
                if twice:
                    raise TypeError(f"{fn.__name__}() got multiple values for {', '.join(twice)}")
                warnings.warn(
                    _message(fn.__name__, positional, named, kwargs), DeprecationWarning, 2
                )
                return by_name(**named, **kwargs)
            return fn(*args, **kwargs)

        return call

    return wrap


def _message(
    name: str, positional: list[str], named: dict[str, Any], kwargs: dict[str, Any]
) -> str:
    moved = [n for n in named if n not in positional]
    given = [n for n in positional if n in named or n in kwargs]
    new = ", ".join([*given, *(f"{n}=..." for n in moved)])
    return (
        f"{name}() takes {', '.join(moved)} by keyword now; passing {'it' if len(moved) == 1 else 'them'} "
        f"by position stops working in the next release. Write {name}({new})."
    )
