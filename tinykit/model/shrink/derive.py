"""The recipes' `[derive]` expressions: arithmetic over config keys, read by a safe AST walk."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from tinykit._values import is_int
from tinykit.errors import ShrinkConstraintError

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


def evaluate(expr: str, node: dict[str, Any], where: str) -> Any:
    """Arithmetic over config keys (dotted names reach sub-configs) and numbers; nothing else.
    A float constant makes a float (xLSTM's width factors are typed float)."""

    def ev(n: ast.AST) -> Any:
        if isinstance(n, ast.Constant) and (is_int(n.value) or isinstance(n.value, float | str)):
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
