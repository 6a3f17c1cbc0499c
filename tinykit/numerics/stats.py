"""The stats kernels: a tensor reduced to its hash and statistics (`summarize`), in a few fused
reductions and one host sync, and the anomaly detector's abs-min/abs-max (`minmax_summaries`)."""

from __future__ import annotations

import hashlib
import math
import struct
import weakref
from typing import TYPE_CHECKING, Any

from tinykit.numerics.summary import TensorSummary, dtype_name

if TYPE_CHECKING:
    import torch

# Tensors up to this many elements keep a copy, so a report can say how much two runs differ
# (max |delta|, how many elements) instead of only that their hashes differ.
KEEP_VALUES_UP_TO = 1 << 16


def flat_and_hash(t: torch.Tensor) -> tuple[torch.Tensor, str]:
    import torch

    flat = t.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() and flat.stride(0) != 1:  # a broadcast size-1 tensor counts as contiguous
        flat = flat.new_empty(flat.numel()).copy_(flat)
    # the numpy view is the tensor's memory: no copy of the bytes to hash them
    digest = hashlib.blake2b(flat.view(torch.uint8).numpy().data, digest_size=16)
    digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
    return flat, digest.hexdigest()


def summarize(
    t: torch.Tensor,
    keep_values: bool,
    name: str = "",
    full_stats: bool = False,
    with_hash: bool = True,
) -> TensorSummary:
    """Hash, shape, dtype, mean/std/absmax; `full_stats` adds min/max, abs-min, the smallest
    non-zero |x| and counts of NaN, +Inf, -Inf and zeros (what a dump index and `describe`
    hold), with mean/std/min/max over the finite elements."""
    import torch

    if with_hash:
        flat, digest = flat_and_hash(t)
    else:
        # the statistics reduce on the tensor's own device: only the few numbers come back
        flat, digest = t.detach().reshape(-1), ""
    mean = std = absmax = None
    extra: dict[str, Any] = {}
    if flat.numel() and not (t.is_complex() or t.dtype == torch.bool):
        if full_stats:
            mean, std, absmax, extra = _full_stats(flat)
        else:
            f64 = flat.to(torch.float64)
            mean, absmax = f64.mean().item(), f64.abs().max().item()
            std = f64.std().item() if flat.numel() > 1 else 0.0
    # small tensors keep a copy for determinism reports; a stats recording (dumps) does not
    keep = keep_values or (with_hash and not full_stats and flat.numel() <= KEEP_VALUES_UP_TO)
    return TensorSummary(
        hash=digest,
        shape=tuple(t.shape),
        dtype=dtype_name(t),
        mean=mean,
        std=std,
        absmax=absmax,
        values=flat.to("cpu", copy=True) if keep else None,
        name=name,
        **extra,
    )


# Reused buffers of `_full_stats` (a fresh large tensor costs page faults, as the allocator maps
# new memory for it, that dwarf the reduction itself) and its `_Slots`. Freed on recorder exit.
scratch_buffers: dict[Any, Any] = {}


def _scratch(like: torch.Tensor, slot: int = 0) -> torch.Tensor:
    key = (like.dtype, like.device, slot)
    buffer = scratch_buffers.get(key)
    if buffer is None or buffer.numel() < like.numel():
        buffer = scratch_buffers[key] = like.new_empty(like.numel())
    return buffer[: like.numel()]  # flat, as `like` is: one view op fewer per tensor


class _Slots:
    """Where `_full_stats` writes its six numbers for one float dtype and device (`out=`: no
    tensor made per number, no stack), read back in one `tolist`: min, max, sum and sum of
    squares as their bits, then the lowest and highest abs-min code. Half of a small tensor's
    cost was making, viewing and stacking those 0-d results."""

    __slots__ = (
        "results",
        "lo",
        "hi",
        "total",
        "squares",
        "code_lo",
        "code_hi",
        "offset",
        "int_dtype",
        "width",
        "unpack",
    )

    def __init__(self, x: torch.Tensor) -> None:
        import torch

        self.width = 32 if x.dtype == torch.float32 else 64
        self.int_dtype = torch.int32 if self.width == 32 else torch.int64
        self.results = torch.empty(6, dtype=self.int_dtype, device=x.device)
        floats = self.results[:4].view(x.dtype)
        self.lo, self.hi, self.total, self.squares = floats.unbind()
        self.code_lo, self.code_hi = self.results[4:].unbind()
        # the code's offset 2**(width-1) - 1, as a 0-d tensor on the device
        self.offset = self.results.new_full((), 2 ** (self.width - 1) - 1)
        packed, real = ("4i", "4f") if self.width == 32 else ("4q", "4d")
        self.unpack = lambda bits: struct.unpack(real, struct.pack(packed, *bits))

    @staticmethod
    def of(x: torch.Tensor) -> _Slots:
        slots = scratch_buffers.get((x.dtype, x.device, "slots"))
        if slots is None:
            slots = scratch_buffers[(x.dtype, x.device, "slots")] = _Slots(x)
        return slots


def _full_stats(flat: torch.Tensor) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(mean, std, absmax, the other fields) in five passes (one writes) and one host sync;
    float32 (float64 for float64 input) is enough for statistics.

    min/max come from one aminmax (NaN and Inf reach them, so a finite tensor is seen from
    them); abs-min, the smallest non-zero |x| and whether there is a zero at all come from ONE
    aminmax over an order-keeping code of the bits (see below). Only a tensor with zeros
    (every gradient of a causal LM: the last position has no label) takes one more pass to count
    them, and only one with NaN/Inf a pass over its finite elements."""
    import torch

    if flat.dtype in (torch.float32, torch.float64):
        x = flat
    else:
        x = flat.float() if flat.is_floating_point() else flat.double()
    n = x.numel()
    s = _Slots.of(x)
    ints = x.view(s.int_dtype)
    # code = 2*bits + 2**(w-1) - 1, wrapping: 2*bits drops the sign bit, so the code is a
    # monotone function of |x|'s bits for |x| > 0, and |x| == 0 wraps to the largest int
    code = torch.add(s.offset, ints, alpha=2, out=_scratch(ints))
    torch.aminmax(x, out=(s.lo, s.hi))  # one pass (amin + amax: two, and slower here)
    # One-pass variance from the sum and the sum of squares (a BLAS dot): two kernels that only
    # read; torch.std_mean is ~40x slower on CPU. Its cancellation is checked below.
    torch.sum(x, 0, out=s.total)
    torch.dot(x, x, out=s.squares)
    torch.aminmax(code, out=(s.code_lo, s.code_hi))
    *bits, code_lo, code_hi = s.results.tolist()  # the one host sync
    lo, hi, total_v, squares_v = s.unpack(bits)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return _non_finite_stats(x)
    mean_v = total_v / n
    var = (squares_v - total_v * mean_v) / max(n - 1, 1)
    if not var > 1e-3 * squares_v / n:
        # the mean dominates (|mean| > ~30 std): the one-pass variance lost its digits to
        # cancellation, so take the two-pass one (a subtraction and a dot product)
        centered = torch.sub(x, mean_v, out=_scratch(x, 1))
        var = torch.dot(centered, centered).item() / max(n - 1, 1)
    top = 2 ** (s.width - 1) - 1
    nz = None if code_lo == top else _decode_absmin(code_lo, s)  # top: all zeros
    zeros = n - _count_nonzero(x) if code_hi == top else 0  # top: some |x| is 0
    extra = {
        "nan": 0,
        "posinf": 0,
        "neginf": 0,
        "zeros": zeros,
        "absmin": 0.0 if zeros else nz,
        "min": lo,
        "max": hi,
        "nonzero_absmin": nz,
    }
    return mean_v, math.sqrt(max(var, 0.0)) if n > 1 else 0.0, max(abs(lo), abs(hi)), extra


def _decode_absmin(code: int, s: _Slots) -> float:
    """|x| from the code `_full_stats` takes the min of (in Python: no tensor op)."""
    width = s.width
    bits = ((code - (2 ** (width - 1) - 1)) % 2**width) // 2  # < 2**(width-1): fits signed
    return s.unpack([bits, 0, 0, 0])[0]


def _count_nonzero(x: torch.Tensor) -> int:
    """How many elements are not 0: sign(x) . sign(x), a write and a BLAS dot (~2.5x faster on
    CPU than torch.count_nonzero); exact while the count fits the float's mantissa."""
    import torch

    if x.numel() >= 2 ** (24 if x.dtype == torch.float32 else 53):
        return int(torch.count_nonzero(x))
    signs = torch.sign(x, out=_scratch(x, 1))
    return round(torch.dot(signs, signs).item())


def _non_finite_stats(x: torch.Tensor) -> tuple[Any, Any, Any, dict[str, Any]]:
    """`_full_stats` of a tensor with NaN/Inf: the counts, and stats over its finite elements."""

    finite_mask = x.isfinite()
    counts = {
        "nan": int(x.isnan().sum()),
        "posinf": int((x == float("inf")).sum()),
        "neginf": int((x == float("-inf")).sum()),
    }
    finite = x[finite_mask]
    if not finite.numel():
        return None, None, None, {**counts, "zeros": 0}
    mean, std, absmax, extra = _full_stats(finite)
    return mean, std, absmax, {**extra, **counts}


def minmax_summaries(
    named: list[tuple[str, torch.Tensor]], seen: dict[int, tuple[Any, int, TensorSummary]]
) -> list[TensorSummary]:
    """Abs-min and abs-max of each tensor with ONE host sync for all of them (the detector's
    per-call cost); NaN/Inf counts are filled in only for a tensor that is not finite.

    `seen` maps id(tensor) to (weakref, version, summary) of tensors summarised before in this
    step: an input that is the unchanged output of the previous module is not reduced again.
    """
    import torch

    out: list[TensorSummary | None] = [None] * len(named)
    todo: list[int] = []
    reductions: list[torch.Tensor] = []
    for i, (name, t) in enumerate(named):
        ref, version, known = seen.get(id(t), (None, -1, None))
        if known is not None and ref is not None and ref() is t and version == t._version:
            out[i] = known if known.name == name else known.renamed(name)
        elif t.is_floating_point() and t.numel() > 0:
            todo.append(i)
            reductions.extend(torch.aminmax(t.detach().abs()))
        else:
            out[i] = TensorSummary(hash="", shape=tuple(t.shape), dtype=dtype_name(t), name=name)
    if todo:
        if len({r.dtype for r in reductions}) > 1:
            reductions = [r.float() for r in reductions]
        values = torch.stack(reductions).tolist()
        for j, i in enumerate(todo):
            name, t = named[i]
            absmin, absmax = values[2 * j], values[2 * j + 1]
            counts: dict[str, int] = {}
            if not absmax < float("inf"):  # inf or NaN somewhere
                d = t.detach()
                counts = {
                    "nan": int(d.isnan().sum()),
                    "posinf": int((d == float("inf")).sum()),
                    "neginf": int((d == float("-inf")).sum()),
                }
            summary = TensorSummary(
                hash="",
                shape=tuple(t.shape),
                dtype=dtype_name(t),
                absmax=absmax,
                absmin=absmin,
                name=name,
                **counts,
            )
            out[i] = summary
            seen[id(t)] = (weakref.ref(t), t._version, summary)
    return [s for s in out if s is not None]
