"""`tinykit.record`: record a model's module calls in memory or into a dump folder.

The recorder itself is `tinykit.numerics.recorder.Recorder` (hooks and steps); the tensor
summaries are in `summary.py` and `stats.py`, backward attribution in `backward.py` and the dump
writer in `dumps.py`. This module checks `record()`'s options, wires in the dump writer, and
re-exports the recorder's names that `check_determinism` and older imports use.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tinykit._deprecate import old_positions
from tinykit.numerics.recorder import Recorder, Sink, probe
from tinykit.numerics.stats import KEEP_VALUES_UP_TO, minmax_summaries, summarize
from tinykit.numerics.summary import (
    RawTensors,
    Record,
    TensorSummary,
    iter_tensors,
    named_tensors,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "KEEP_VALUES_UP_TO",
    "RawTensors",
    "Record",
    "Recorder",
    "Sink",
    "TensorSummary",
    "iter_tensors",
    "minmax_summaries",
    "named_tensors",
    "probe",
    "record",
    "summarize",
]


@old_positions("model", "modules", "what", "steps", "tensors", "out", "max_bytes")
def record(
    model: torch.nn.Module | None = None,
    *,
    modules: str | Iterable[str] = "*",
    what: Iterable[str] = ("input", "output", "grad", "step"),
    steps: Iterable[int] | None = None,
    tensors: str = "stats",
    out: str | os.PathLike[str] | None = None,
    max_bytes: int | None = None,
    frames: int | None = None,
    hashes: bool | None = None,
    first_step: int = 0,
) -> Recorder:
    """Record every call of `model`'s modules (matching the `modules` glob): a context manager.

    Each top-level call of the model also makes its step's own records ("step" in `what`):
    "input" (the tensors it was given, by name: `labels`, `input_ids`), "params" (the
    parameters of the recorded modules as the step began) and "loss" (the `loss` it returned);
    `diff_dumps` checks them before any module.

    Args:
        model: the model; its top-level calls after the first start new steps (or call
            `rec.next_step()`). None records every module called inside the block: the first
            root module with parameters (one called outside any other) is taken as the model,
            named as if it had been passed (for a model built inside code you cannot change).
        modules: glob(s) on qualified names, e.g. "model.layers.*.mlp".
        what: any of "input", "output", "grad" (each module's backward: the gradient it received
            and the one it passed on), "param" (the module's own parameters, in each of its
            records) and "step" (the step records above).
        steps: record only these steps (None: all).
        tensors: "stats" (hash, shape, dtype, min/max/mean/std, NaN/Inf/zero counts) or "full"
            (also the tensors, into safetensors shards; needs `out`).
        out: a new folder to write the dump into (read it with `tinykit.diff_dumps` or
            `tinykit dumps diff`); None keeps the records in memory (`rec.records`).
        max_bytes: a bound on the dump's size; records past it are left out and the manifest
            says `truncated`.
        frames: keep only the last N records in memory (a ring buffer; the dump keeps all).
        hashes: hash every tensor's bytes (blake2b; a stats dump is diffed bitwise by them).
            Default: when writing a dump (`out`); in memory the summaries' `hash` is "" unless
            hashes=True, as hashing costs a copy to the CPU and a pass over every byte.
        first_step: the number of the first step (a run resumed at step 4 passes 4, so its
            steps line up with the uninterrupted run's in `diff_dumps`).
    """
    from tinykit.errors import UsageError

    if tensors not in ("stats", "full"):
        raise UsageError(f"record(tensors={tensors!r}) is unknown. Use 'stats' or 'full'.")
    if tensors == "full" and out is None:
        raise UsageError("record(tensors='full') writes tensors to disk: pass out=DIR too.")
    if max_bytes is not None and max_bytes < 1:
        raise UsageError(f"record(max_bytes={max_bytes}) must be >= 1 or None.")
    if isinstance(first_step, bool) or not isinstance(first_step, int) or first_step < 0:
        raise UsageError(f"record(first_step={first_step!r}) must be a whole number >= 0.")
    sink = None
    if out is not None:
        from tinykit.numerics.dumps import DumpWriter

        options = {
            "modules": [modules] if isinstance(modules, str) else list(modules),
            "what": sorted(what),
            "steps": None if steps is None else sorted(steps),
            "tensors": tensors,
            "max_bytes": max_bytes,
            "first_step": first_step,
        }
        sink = DumpWriter(out, model, tensors, max_bytes, options)
    return Recorder(
        model=model,
        modules=modules,
        what=what,
        summary="stats",
        frames=frames,
        steps=steps,
        sink=sink,
        hashes=out is not None if hashes is None else hashes,
        auto_steps=True,
        first_step=first_step,
    )
