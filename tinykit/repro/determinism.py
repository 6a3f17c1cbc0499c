"""`check_determinism`: run seeded code twice and name the first module that diverged.

Each run is seeded with `tinykit.repro.seed.seed_everything` and recorded by
`tinykit.numerics.record.Recorder` (every module's forward inputs, outputs, own parameters and
output gradients). Two runs are compared record by record, in the order they happened. The root
cause is the first record whose output differs while its inputs and parameters matched (the
Megatron-LM method; pytorch/pytorch#101246 asks for exactly this). If there is none, the first
record whose inputs or parameters already differ is reported: the data or the initialisation
changed before any module ran.

mode="process" runs each repetition in a fresh interpreter (`python -m tinykit.repro.determinism`), so
state that survives inside one process (unseeded generators created at import, caches) cannot hide
or fake a difference; `fn` must then be importable as "module:function" or "path/file.py:function".
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tinykit.errors import NondeterminismError, UsageError
from tinykit.numerics.record import Record, Recorder, TensorSummary, probe

__all__ = ["DeterminismReport", "FirstDiff", "check_determinism", "probe"]

Mode = Literal["process", "inprocess"]


@dataclass(frozen=True)
class FirstDiff:
    """Where two runs first diverged. `kind`: forward | grad | probe | input | state | order."""

    module: str
    kind: str
    call: int
    run: int  # the run compared against run 0
    detail: str


@dataclass
class DeterminismReport:
    """The result of a check: `equal` is True when every record matched."""

    fn: str
    mode: str
    runs: int
    seed: int
    atol: float
    records: int
    modules: int
    seconds: list[float] = field(default_factory=list)
    equal: bool = True
    first_diff: FirstDiff | None = None


def check_determinism(
    fn: Callable[[], Any] | str,
    runs: int = 2,
    mode: Mode = "process",
    atol: float = 0,
    *,
    seed: int = 0,
    deterministic: bool = False,
) -> DeterminismReport:
    """Run `fn` `runs` times under the same seed and compare every module's outputs and gradients.

    Args:
        fn: a zero-argument callable (e.g. a few training steps of a tiny model), or its
            reference "module:function" / "path/to/file.py:function".
        runs: how many runs; each is compared against the first.
        mode: "process" runs each in a fresh interpreter; "inprocess" runs them here, one after
            the other.
        atol: 0 compares bitwise; otherwise elementwise |a - b| <= atol.
        seed: the seed given to `seed_everything` before each run.
        deterministic: also switch torch to deterministic algorithms in each run.

    Returns:
        A `DeterminismReport` with `equal=True`.

    Raises:
        NondeterminismError: the runs differ; `.first_diff` names the module, `.report` has all.
        UsageError: bad arguments, or `fn` is not importable in process mode.
    """
    if runs < 2:
        raise UsageError(
            f"check_determinism(runs={runs}) cannot compare anything. Pass runs=2 or more."
        )
    if mode not in ("process", "inprocess"):
        raise UsageError(
            f"check_determinism(mode={mode!r}) is unknown. Use mode='process' or mode='inprocess'."
        )
    if atol < 0:
        raise UsageError(f"check_determinism(atol={atol}) is negative. Pass atol=0 for bitwise.")
    ref = fn if isinstance(fn, str) else _reference(fn) if mode == "process" else _describe(fn)
    keep_values = atol > 0
    if mode == "process":
        results = _run_in_processes(ref, runs, seed, deterministic, keep_values)
    else:
        call = resolve(fn) if isinstance(fn, str) else fn
        results = [record_run(call, seed, deterministic, keep_values) for _ in range(runs)]
    records = [r for r, _ in results]
    report = DeterminismReport(
        fn=ref,
        mode=mode,
        runs=runs,
        seed=seed,
        atol=atol,
        records=len(records[0]),
        modules=len({r.module for r in records[0]}),
        seconds=[round(s, 3) for _, s in results],
    )
    for i in range(1, runs):
        first = compare(records[0], records[i], atol, run=i)
        if first is not None:
            report.equal, report.first_diff = False, first
            flags = " --deterministic" if deterministic else ""
            again = (
                ""
                if "<" in ref
                else f" Reproduce: tinykit check-determinism {ref} "
                f"--mode {mode} --seed {seed}{flags}"
            )
            raise NondeterminismError(
                f"{runs} runs of {ref} differ (seed={seed}, mode={mode}, "
                f"deterministic={deterministic}): {first.detail}{again}",
                first_diff=first,
                seed=seed,
                report=report,
            )
    return report


def record_run(
    fn: Callable[[], Any], seed: int, deterministic: bool, keep_values: bool
) -> tuple[list[Record], float]:
    """Seed, then run `fn` once under a `Recorder`; returns the records and the seconds taken."""
    from tinykit.repro.seed import seed_everything

    seed_everything(seed, deterministic=deterministic)
    start = time.perf_counter()
    with Recorder(keep_values=keep_values) as rec:
        fn()
    return rec.records, time.perf_counter() - start


def compare(a: list[Record], b: list[Record], atol: float = 0, run: int = 1) -> FirstDiff | None:
    """The first divergence between two recorded runs, or None when they match.

    With atol > 0 the runs match when every tensor is within atol. When they do not, the root
    cause is still searched bitwise: a tolerance lets small differences grow unseen (a norm
    amplifies them), so the module that first went beyond atol is usually not the one at fault.
    """
    if atol > 0:
        exceeded = _first_beyond(a, b, atol)
        if exceeded is None:
            return None
        first = _first_divergence(a, b, run)
        ra, rb = exceeded
        where = f"{_label(ra)}{_pair_stats(ra.outputs, rb.outputs, atol, run)}"
        if first is None:
            return FirstDiff(ra.module, ra.kind, ra.call, run, f"{where} is beyond atol={atol:g}.")
        if first.kind == "order":
            return first
        return FirstDiff(
            first.module,
            first.kind,
            first.call,
            run,
            f"{first.detail} The tolerance atol={atol:g} is first exceeded at {where}.",
        )
    return _first_divergence(a, b, run)


def _first_beyond(a: list[Record], b: list[Record], atol: float) -> tuple[Record, Record] | None:
    for ra, rb in zip(a, b, strict=False):
        if ra.key != rb.key or not _same(ra.outputs, rb.outputs, atol):
            return ra, rb
    return (a[-1], b[-1]) if len(a) != len(b) else None


def _first_divergence(a: list[Record], b: list[Record], run: int) -> FirstDiff | None:
    """Bitwise: the first record whose output differs while everything it depends on matched."""
    upstream: tuple[Record, Record, str] | None = None  # earliest record whose inputs differ
    clean_so_far = True  # no earlier record differed at all
    for ra, rb in zip(a, b, strict=False):
        if ra.key != rb.key:
            return FirstDiff(
                ra.module,
                "order",
                ra.call,
                run,
                f"the runs took different paths: run 0 recorded {_label(ra)} where "
                f"run {run} recorded {_label(rb)}. Control flow depends on "
                "unseeded state.",
            )
        # A forward record lists its inputs; a gradient or a probe depends on everything before it.
        inputs_same = _same(ra.inputs, rb.inputs, 0) and (ra.kind == "forward" or clean_so_far)
        state_same = ra.state == rb.state
        outputs_same = _same(ra.outputs, rb.outputs, 0)
        if inputs_same and state_same and not outputs_same:
            return FirstDiff(ra.module, ra.kind, ra.call, run, _culprit_detail(ra, rb, run))
        clean_so_far = clean_so_far and inputs_same and state_same and outputs_same
        if (
            ra.kind == "forward"
            and (not inputs_same or not state_same)
            and (upstream is None or ra.seq < upstream[0].seq)
        ):
            upstream = (ra, rb, "inputs" if not inputs_same else "parameters/buffers")
    if len(a) != len(b):
        extra = (a if len(a) > len(b) else b)[min(len(a), len(b))]
        return FirstDiff(
            extra.module,
            "order",
            extra.call,
            run,
            f"run 0 made {len(a)} records and run {run} made {len(b)}; the first "
            f"unmatched one is {_label(extra)}.",
        )
    if upstream is not None:
        ra, rb, what = upstream
        kind = "input" if what == "inputs" else "state"
        stats = _pair_stats(ra.inputs, rb.inputs, 0, run) if kind == "input" else ""
        return FirstDiff(
            ra.module,
            kind,
            ra.call,
            run,
            f"the {what} of '{ra.module}' (call {ra.call}) already differ before it "
            f"ran, and no module before it diverged{stats}. "
            + (
                "The data fed to the model changed (order or content): seed the data "
                "loader with tinykit.repro.seed.dataloader_kwargs(seed), or call "
                "tinykit.repro.determinism.probe('batch', batch) to record it."
                if kind == "input"
                else "The parameters were initialised or updated differently: build the "
                "model after seeding, and check the optimizer step."
            ),
        )
    return None


def _same(xs: list[TensorSummary], ys: list[TensorSummary], atol: float) -> bool:
    return len(xs) == len(ys) and all(_same_tensor(x, y, atol) for x, y in zip(xs, ys, strict=True))


def _same_tensor(x: TensorSummary, y: TensorSummary, atol: float) -> bool:
    if x.hash == y.hash:
        return True
    if atol == 0 or x.shape != y.shape or x.values is None or y.values is None:
        return False
    return _max_delta(x, y) <= atol


def _max_delta(x: TensorSummary, y: TensorSummary) -> float:
    import torch

    a, b = x.values.to(torch.float64), y.values.to(torch.float64)
    both_nan = torch.isnan(a) & torch.isnan(b)
    delta = torch.where(both_nan, torch.zeros_like(a), (a - b).abs())
    return float(delta.nan_to_num(nan=float("inf")).max()) if delta.numel() else 0.0


def _label(r: Record) -> str:
    what = {"forward": "output", "grad": "gradient of the output"}.get(r.kind, r.kind)
    return f"'{r.module}' ({what}, call {r.call})"


def _culprit_detail(ra: Record, rb: Record, run: int) -> str:
    stats = _pair_stats(ra.outputs, rb.outputs, 0, run)
    if ra.kind == "grad":
        suspect = (
            f"the backward of '{ra.parent}' (which called '{ra.module}') or of another "
            "module that consumes this output"
            if ra.parent
            else "the backward of a module that consumes this output"
        )
        return (
            f"{_label(ra)} is the first to differ, while the whole forward pass matched"
            f"{stats}. The backward that produced it is nondeterministic: look first at "
            f"{suspect} (custom autograd functions, scatter/index_add backward, atomics)."
        )
    why = (
        "while its inputs and parameters matched"
        if ra.kind == "forward"
        else "and nothing recorded before it differed"
    )
    return (
        f"{_label(ra)} is the first to differ, {why}{stats}. Look at what '{ra.module}' "
        "computes: unseeded randomness, a generator that seed_everything does not reset, or "
        "an order-dependent reduction."
    )


def _pair_stats(xs: list[TensorSummary], ys: list[TensorSummary], atol: float, run: int) -> str:
    for i, (x, y) in enumerate(zip(xs, ys, strict=False)):
        if not _same_tensor(x, y, atol):
            delta = ""
            if x.values is not None and y.values is not None and x.shape == y.shape:
                differ = int((x.values != y.values).sum())
                delta = (
                    f"; {differ}/{x.values.numel()} elements differ, "
                    f"max|delta|={_max_delta(x, y):.3g}"
                )
            return f" (tensor {i}: run 0 {x.stats()}; run {run} {y.stats()}{delta})"
    return ""


# -- process mode ---------------------------------------------------------------------------


def _describe(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def _reference(fn: Callable[..., Any]) -> str:
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        raise UsageError(
            f"check_determinism(mode='process') cannot import {_describe(fn)} in a fresh process: "
            "it is a lambda, a nested function or defined in __main__. Move it to a module "
            "(then pass fn or 'module:function'), or use mode='inprocess'."
        )
    return f"{module}:{qualname}"


def resolve(ref: str) -> Callable[[], Any]:
    """Import "module:function" or "path/to/file.py:function" (also used by the child process)."""
    target, sep, qualname = ref.rpartition(":")
    if not sep or not target or not qualname:
        raise UsageError(
            f"{ref!r} is not a function reference. Write it as "
            "'package.module:function' or 'path/to/script.py:function'."
        )
    try:
        if target.endswith(".py"):
            path = Path(target).resolve()
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or not path.is_file():
                raise FileNotFoundError(path)
            obj: Any = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(path.stem, obj)
            spec.loader.exec_module(obj)  # type: ignore[union-attr]
        else:
            # Process mode's child runs with `python -m`, which puts the working directory on
            # sys.path; a console script does not: find modules of the current folder here too.
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.append(os.getcwd())
            obj = importlib.import_module(target)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, FileNotFoundError, AttributeError) as e:
        raise UsageError(
            f"cannot load {ref!r}: {type(e).__name__}: {e}. Check the module path "
            "(run from the directory that contains it, or set PYTHONPATH) and the "
            "function name."
        ) from e
    if not callable(obj):
        raise UsageError(f"{ref!r} is a {type(obj).__name__}, not a function. Point at a callable.")
    return obj


def _run_in_processes(
    ref: str, runs: int, seed: int, deterministic: bool, keep_values: bool
) -> list[tuple[list[Record], float]]:
    env = dict(os.environ)
    # The child must find what the parent can import (pytest and scripts extend sys.path).
    env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
    with tempfile.TemporaryDirectory(prefix="tinykit-determinism-") as tmp:
        outs = [Path(tmp) / f"run{i}.pkl" for i in range(runs)]
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tinykit.repro.determinism",
                    ref,
                    str(seed),
                    str(int(deterministic)),
                    str(int(keep_values)),
                    str(out),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for out in outs
        ]
        errors = [p.communicate()[1] for p in procs]
        results = []
        for proc, out, err in zip(procs, outs, errors, strict=True):
            if proc.returncode != 0 or not out.exists():
                raise _child_failure(ref, proc.returncode, err)
            payload = pickle.loads(out.read_bytes())
            if "error" in payload:
                raise payload["error"]
            results.append((payload["records"], payload["seconds"]))
    return results


def _child_failure(ref: str, code: int, stderr: str) -> Exception:
    tail = stderr.strip().splitlines()[-1] if stderr.strip() else "no output"
    return UsageError(
        f"the child process running {ref} exited with code {code} without a "
        f"result ({tail}). Run the check with mode='inprocess' (CLI: --mode "
        "inprocess) to see the error in this process."
    )


def _child_main(argv: list[str]) -> int:
    ref, seed, deterministic, keep_values, out = argv
    try:
        records, seconds = record_run(
            resolve(ref), int(seed), bool(int(deterministic)), bool(int(keep_values))
        )
        payload: dict[str, Any] = {"records": records, "seconds": seconds}
    except Exception as e:  # sent back to the parent, which raises it there
        e.add_note("".join(traceback.format_exception(e)).rstrip())
        try:
            pickle.dumps(e)
        except Exception:
            raise e from None
        payload = {"error": e}
    Path(out).write_bytes(pickle.dumps(payload))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
