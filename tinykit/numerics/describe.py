"""`tinykit.describe(x)`: one line per tensor, and context managers for printing tensors.

    >>> print(tinykit.describe({"logits": torch.tensor([1.0, float("nan"), 0.0])}))
    logits: tensor[3] float32 cpu n=3 12B x∈[0, 1] μ=0.5 σ=0.707 |x|>0≥1 zeros=1 NaN!(1)

Each line holds shape, dtype, device, element count, bytes, min/max, mean/std (over the finite
elements), the smallest non-zero |x| (how close to underflow), the number of zeros, loud
`NaN!`/`+Inf!`/`-Inf!` flags with their counts, and `grad`/`.grad` when autograd is involved. It
takes tensors, nested dicts/lists/tuples, `ModelOutput`s, state dicts and modules (their state
dict). The numbers are the dump index's (`stats.summarize`, the one summary type).

`one_line_repr()` makes `repr(tensor)` this line (and restores it); `full_precision()` switches
torch's print options to every element at full precision (the needle-in-a-haystack dump: diff
two printouts) and back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tinykit.numerics.stats import summarize

if TYPE_CHECKING:
    import torch

__all__ = ["describe", "describe_tensor", "full_precision", "one_line_repr"]


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n}B"


def describe_tensor(t: torch.Tensor, name: str | None = None) -> str:
    """One line for one tensor (see the module docstring)."""
    import torch

    shape = "[" + ", ".join(str(d) for d in t.shape) + "]"
    dtype = str(t.dtype).removeprefix("torch.")
    parts = [f"tensor{shape}", dtype, str(t.device), f"n={t.numel()}"]
    parts.append(_size(t.numel() * t.element_size()))
    if t.device.type == "meta" or t.numel() == 0:
        pass
    elif t.is_complex() or t.dtype == torch.bool:
        if t.dtype == torch.bool:
            parts.append(f"true={int(t.sum())}")
    else:
        s = summarize(t, keep_values=False, full_stats=True, with_hash=False)
        if s.min is not None:
            parts.append(f"x∈[{_num(s.min)}, {_num(s.max)}]")
            parts.append(f"μ={_num(s.mean)} σ={_num(s.std)}")
            if s.nonzero_absmin is not None and t.is_floating_point():
                parts.append(f"|x|>0≥{_num(s.nonzero_absmin)}")
        if s.zeros:
            parts.append("all zeros" if s.zeros == t.numel() else f"zeros={s.zeros}")
        if s.flags():
            parts.append(s.flags())
    if t.requires_grad:
        parts.append("grad")
    if getattr(t, "grad", None) is not None:
        parts.append(".grad")
    line = " ".join(parts)
    return f"{name}: {line}" if name else line


def _walk(value: Any, name: str) -> Iterator[str]:
    import torch

    if isinstance(value, torch.Tensor):
        yield describe_tensor(value, name or None)
    elif isinstance(value, torch.nn.Module):
        yield from _walk(value.state_dict(), name)
    elif isinstance(value, Mapping):  # dicts, state dicts, ModelOutput
        for k, v in value.items():
            yield from _walk(v, f"{name}.{k}" if name else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _walk(v, f"{name}[{i}]")
    elif value is not None:
        yield f"{name}: {type(value).__name__} (not a tensor)" if name else repr(value)


def describe(x: Any, name: str | None = None) -> str:
    """One line per tensor in `x` (a tensor, nested containers, a ModelOutput, a state dict or
    a module), named by its path ("logits", "past_key_values[0][1]")."""
    return "\n".join(_walk(x, name or ""))


@contextlib.contextmanager
def one_line_repr() -> Iterator[None]:
    """`repr(tensor)` (and printing it in containers) gives `describe`'s line inside the block."""
    import torch

    original = torch.Tensor.__repr__
    torch.Tensor.__repr__ = lambda self, *a, **k: describe_tensor(self)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.Tensor.__repr__ = original  # type: ignore[method-assign,assignment]


@contextlib.contextmanager
def full_precision(precision: int = 10, sci_mode: bool | None = None) -> Iterator[None]:
    """Print every element at `precision` digits inside the block, then restore the options."""
    import torch
    from torch._tensor_str import PRINT_OPTS

    saved = {
        "precision": PRINT_OPTS.precision,
        "threshold": PRINT_OPTS.threshold,
        "edgeitems": PRINT_OPTS.edgeitems,
        "linewidth": PRINT_OPTS.linewidth,
        "sci_mode": PRINT_OPTS.sci_mode,
    }
    torch.set_printoptions(
        precision=precision, threshold=2**62, edgeitems=3, linewidth=120, sci_mode=sci_mode
    )
    try:
        yield
    finally:
        torch.set_printoptions(**saved)
