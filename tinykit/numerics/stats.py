"""The stats kernels: a tensor reduced to its hash and statistics (`summarize`), in a few fused
reductions and one host sync, and the anomaly detector's abs-min/abs-max (`minmax_summaries`)."""

from __future__ import annotations

import dataclasses
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


# Reused buffers for the temporaries of `_full_stats`: a fresh large tensor costs page faults
# (the allocator maps new memory for it) that dwarf the reduction itself. Freed on recorder exit.
scratch_buffers: dict[tuple[Any, Any, int], torch.Tensor] = {}


def _scratch(like: torch.Tensor, slot: int = 0) -> torch.Tensor:
    key = (like.dtype, like.device, slot)
    buffer = scratch_buffers.get(key)
    if buffer is None or buffer.numel() < like.numel():
        buffer = scratch_buffers[key] = like.new_empty(like.numel())
    return buffer[: like.numel()]  # flat, as `like` is: one view op fewer per tensor


def _full_stats(flat: torch.Tensor) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(mean, std, absmax, the other fields) in four reductions that read the tensor and write
    nothing, and one host sync; float32 (float64 for float64 input) is enough for statistics.

    The common case, a finite tensor with no exact zero, is seen from its min/max (NaN and Inf
    reach them) and its abs-min (> 0: no zero, and it is the smallest non-zero |x| too); only a
    tensor with zeros takes a second pass to count them, and one with NaN/Inf a pass over its
    finite elements."""
    import torch

    if flat.dtype in (torch.float32, torch.float64):
        x = flat
    else:
        x = flat.float() if flat.is_floating_point() else flat.double()
    n = x.numel()
    absf = torch.abs(x, out=_scratch(x))
    lo_hi = torch.aminmax(x)
    # One-pass variance from the sum and the sum of squares (a BLAS dot): two kernels that only
    # read; torch.std_mean is ~40x slower on CPU. Its cancellation is checked below.
    total, squares = x.sum(), torch.dot(x, x)
    lo, hi, amin, total_v, squares_v = torch.stack([*lo_hi, absf.min(), total, squares]).tolist()
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return _non_finite_stats(x)
    mean_v = total_v / n
    var = (squares_v - total_v * mean_v) / max(n - 1, 1)
    if not var > 1e-3 * squares_v / n:
        # the mean dominates (|mean| > ~30 std): the one-pass variance lost its digits to
        # cancellation, so take the two-pass one (a subtraction and a dot product)
        centered = torch.sub(x, mean_v, out=_scratch(x, 1))
        var = torch.dot(centered, centered).item() / max(n - 1, 1)
    zeros, nz = 0, amin
    if amin == 0.0:
        zeros, nz = _zeros_and_nonzero_absmin(x, absf)
    extra = {
        "nan": 0,
        "posinf": 0,
        "neginf": 0,
        "zeros": zeros,
        "absmin": amin,
        "min": lo,
        "max": hi,
        "nonzero_absmin": nz or None,
    }
    return mean_v, math.sqrt(max(var, 0.0)) if n > 1 else 0.0, max(abs(lo), abs(hi)), extra


def _zeros_and_nonzero_absmin(x: torch.Tensor, absf: torch.Tensor) -> tuple[int, float]:
    """How many elements are 0, and the smallest |x| > 0 (0.0 when there is none)."""
    import torch

    # Without a mask (boolean ops are slow on CPU): the bits of a float >= 0 order as its
    # value, so bits - 1 keeps the order and sends 0 to -1, which the sign mask turns into the
    # largest pattern (a NaN's, that no finite |x| has).
    ints, top = (
        (torch.int64, (1 << 63) - 1) if x.dtype == torch.float64 else (torch.int32, 2**31 - 1)
    )
    nz_bits = int(absf.view(ints).sub_(1).bitwise_and_(top).min())  # absf is ours to overwrite
    # + 1 back, read as a float (in Python: no tensor ops); with no non-zero element the
    # pattern wraps to -0.0
    bits, real = ("Q", "d") if x.dtype == torch.float64 else ("I", "f")
    (nz,) = struct.unpack(real, struct.pack(bits, (nz_bits + 1) & (2 * top + 1)))
    return x.numel() - int(torch.count_nonzero(x)), nz


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
            out[i] = known if known.name == name else dataclasses.replace(known, name=name)
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
