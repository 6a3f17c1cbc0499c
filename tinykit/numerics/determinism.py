"""`check_determinism`: run seeded code twice and name the first module that diverged.

Each run is seeded with `tinykit.repro.seed.seed_everything` and recorded by
`tinykit.numerics.recorder.Recorder` (every module's forward inputs, outputs and parameters, and
the gradients each module's backward received and passed on). Two runs are compared record by record, in the order they happened. The root
cause is the first record whose output differs while its inputs and parameters matched (the
Megatron-LM method; pytorch/pytorch#101246 asks for exactly this). If there is none, the first
record whose inputs or parameters already differ is reported: the data or the initialisation
changed before any module ran.

mode="process" runs each repetition in a fresh interpreter (`tinykit._child`), so
state that survives inside one process (unseeded generators created at import, caches) cannot hide
or fake a difference; `fn` must then be importable as "module:function" or "path/file.py:function".
Each interpreter hashes strings with its own random seed, so a set or a dict of strings iterates
in another order in each: when the data or the path differs, two more runs with PYTHONHASHSEED=0
tell whether that is why (`FirstDiff.cause` "hash order").
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from tinykit._child import Child, FunctionRef, describe, resolve
from tinykit._deprecate import old_positions
from tinykit.errors import CheckFailed, NondeterminismError, UsageError
from tinykit.numerics.compare import compare_summaries
from tinykit.numerics.recorder import Recorder, probe
from tinykit.numerics.summary import FORWARD, GRAD, PROBE, Record, TensorSummary

__all__ = ["DeterminismReport", "FirstDiff", "check_determinism", "probe"]

Mode = Literal["process", "inprocess"]

# FirstDiff.kind when no module is at fault: what already differed before any module ran
INPUT = "input"  # a module's inputs: the data
STATE = "state"  # a module's parameters or buffers: the initialisation or an update
ORDER = "order"  # the sequence of records: the runs took different paths
HASH_ORDER = "hash order"  # FirstDiff.cause: Python's per-process string hash seed
DATA_ADVICE = (
    "The data fed to the model changed (order or content): seed the data loader with "
    "tinykit.seed.dataloader_kwargs(seed), or call tinykit.probe('batch', batch) to record it."
)


@dataclass(frozen=True)
class FirstDiff:
    """Where two runs first diverged. `kind`: the record's (FORWARD, GRAD, PROBE), or INPUT,
    STATE, ORDER."""

    module: str
    kind: str
    call: int
    run: int  # the run compared against run 0
    detail: str
    cause: str = ""  # what is known to make the difference (HASH_ORDER), when it was tested


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


@old_positions("fn", "runs", "mode", "atol")
def check_determinism(
    fn: Callable[[], Any] | str,
    *,
    runs: int = 2,
    mode: Mode = "process",
    atol: float = 0,
    seed: int = 0,
    deterministic: bool = False,
    timeout: float | None = None,
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
        timeout: seconds the runs may take; past it they are stopped and the check fails:
            in process mode the children are killed (ChildProcessFailed), in inprocess mode a
            SIGALRM interrupts the run (CheckFailed; main thread only). None: no limit.

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
    if timeout is not None and not 0 < timeout <= 86400:
        raise UsageError(
            f"check_determinism(timeout={timeout}) is out of range. Pass 0 < seconds <= 86400."
        )
    ref = fn if isinstance(fn, str) else _reference(fn) if mode == "process" else describe(fn)
    keep_values = atol > 0
    if mode == "process":
        results = _run_in_processes(ref, runs, seed, deterministic, keep_values, timeout)
    else:
        call = resolve(fn) if isinstance(fn, str) else fn
        with _alarm(timeout, ref):
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
        if first is not None and mode == "process" and first.kind in (INPUT, PROBE, ORDER):
            first = _hash_order(first, ref, seed, deterministic, keep_values, atol, timeout)
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
    return list(rec.records), time.perf_counter() - start


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
        if first.kind == ORDER:
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
    forward_clean = True  # no earlier forward or probe record differed
    for ra, rb in zip(a, b, strict=False):
        if ra.key != rb.key:
            return FirstDiff(
                ra.module,
                ORDER,
                ra.call,
                run,
                f"the runs took different paths: run 0 recorded {_label(ra)} where "
                f"run {run} recorded {_label(rb)}. Control flow depends on "
                "unseeded state.",
            )
        # A forward record lists its inputs. A backward lists the gradient it received and also
        # depends on the activations it saved, so on a forward pass that matched. A probe depends
        # on everything before it.
        inputs_same = _same(ra.inputs, rb.inputs, 0) and (
            ra.kind == FORWARD
            or (ra.kind == GRAD and forward_clean)
            or (ra.kind == PROBE and clean_so_far)
        )
        state_same = ra.state == rb.state
        outputs_same = _same(ra.outputs, rb.outputs, 0)
        if inputs_same and state_same and not outputs_same:
            return FirstDiff(ra.module, ra.kind, ra.call, run, _culprit_detail(ra, rb, run))
        matched = inputs_same and state_same and outputs_same
        clean_so_far = clean_so_far and matched
        forward_clean = forward_clean and (ra.kind == GRAD or matched)
        if (
            ra.kind == FORWARD
            and (not inputs_same or not state_same)
            and (upstream is None or ra.seq < upstream[0].seq)
        ):
            upstream = (ra, rb, INPUT if not inputs_same else STATE)
    if len(a) != len(b):
        extra = (a if len(a) > len(b) else b)[min(len(a), len(b))]
        return FirstDiff(
            extra.module,
            ORDER,
            extra.call,
            run,
            f"run 0 made {len(a)} records and run {run} made {len(b)}; the first "
            f"unmatched one is {_label(extra)}.",
        )
    if upstream is not None:
        ra, rb, differs = upstream
        data = differs == INPUT
        stats = _pair_stats(ra.inputs, rb.inputs, 0, run) if data else ""
        return FirstDiff(
            ra.module,
            differs,
            ra.call,
            run,
            f"the {'inputs' if data else 'parameters/buffers'} of '{ra.module}' (call {ra.call}) "
            f"already differ before it ran, and no module before it diverged{stats}. "
            + (
                DATA_ADVICE
                if data
                else "The parameters were initialised or updated differently: build the "
                "model after seeding, and check the optimizer step."
            ),
        )
    return None


def _same(xs: list[TensorSummary], ys: list[TensorSummary], atol: float) -> bool:
    return len(xs) == len(ys) and all(_same_tensor(x, y, atol) for x, y in zip(xs, ys, strict=True))


def _same_tensor(x: TensorSummary, y: TensorSummary, atol: float) -> bool:
    return compare_summaries(x, y, atol=atol)[0]


def _label(r: Record) -> str:
    what = {FORWARD: "output", GRAD: "backward: gradient of its inputs"}.get(r.kind, r.kind)
    return f"'{r.module}' ({what}, call {r.call})"


def _culprit_detail(ra: Record, rb: Record, run: int) -> str:
    stats = _pair_stats(ra.outputs, rb.outputs, 0, run)
    if ra.kind == GRAD:
        return (
            f"{_label(ra)} is the first to differ: its backward received the same gradient and "
            f"passed on a different one, while the whole forward pass matched{stats}. The "
            f"backward of '{ra.module}' is nondeterministic (custom autograd functions, "
            "scatter/index_add backward, atomics)."
        )
    why = (
        "while its inputs and parameters matched"
        if ra.kind == FORWARD
        else "and nothing recorded before it differed"
    )
    return (
        f"{_label(ra)} is the first to differ, {why}{stats}. Look at what '{ra.module}' "
        "computes: unseeded randomness, a generator that seed_everything does not reset, or "
        "an order-dependent reduction."
    )


def _pair_stats(xs: list[TensorSummary], ys: list[TensorSummary], atol: float, run: int) -> str:
    for i, (x, y) in enumerate(zip(xs, ys, strict=False)):
        same, diff = compare_summaries(x, y, atol=atol)
        if not same:
            delta = ""
            if diff is not None:
                delta = (
                    f"; {diff.mismatch_line()}, greatest absolute difference "
                    f"{diff.max_abs:.3g} at index {diff.max_abs_at}"
                )
            return f" (tensor {i}: run 0 {x.stats()}; run {run} {y.stats()}{delta})"
    return ""


# -- process mode ---------------------------------------------------------------------------


def _reference(fn: Callable[..., Any]) -> str:
    try:
        return str(FunctionRef.of(fn, "a fresh process (check_determinism mode='process')"))
    except UsageError as e:
        raise UsageError(f"{e} Or use mode='inprocess'.") from None


def recorded_run(
    ref: str, seed: int, deterministic: bool, keep_values: bool
) -> tuple[list[Record], float]:
    """`record_run` of the function `ref` names: what each process-mode child runs."""
    return record_run(resolve(ref), seed, deterministic, keep_values)


def _hash_order(
    first: FirstDiff,
    ref: str,
    seed: int,
    deterministic: bool,
    keep_values: bool,
    atol: float,
    timeout: float | None,
) -> FirstDiff:
    """Whether the data (or the path) differs because each process hashes strings with its own
    seed: two more runs with PYTHONHASHSEED=0 match when it does. Nothing to test when the
    seed is already fixed for every run."""
    if os.environ.get("PYTHONHASHSEED", "random") != "random":
        return first
    pinned = {**os.environ, "PYTHONHASHSEED": "0"}
    again = _run_in_processes(ref, 2, seed, deterministic, keep_values, timeout, env=pinned)
    if compare(again[0][0], again[1][0], atol, run=1) is not None:
        return dataclasses.replace(
            first,
            detail=f"{first.detail} (Not Python's hash order: runs with PYTHONHASHSEED=0 "
            "differ too.)",
        )
    return dataclasses.replace(
        first,
        cause=HASH_ORDER,
        detail=f"{first.detail.replace(DATA_ADVICE, '').rstrip()} It is Python's hash order: two more runs with PYTHONHASHSEED=0 "
        "match. Something iterates a set (or a dict keyed by strings/bytes built from one) "
        "whose order follows each process's random hash seed, e.g. a vocabulary or a label "
        "list made with set(): sort it (sorted(set(...))), or export PYTHONHASHSEED=0 before "
        "Python starts.",
    )


@contextlib.contextmanager
def _alarm(timeout: float | None, ref: str) -> Iterator[None]:
    """Interrupt the block after `timeout` seconds (a hung function in inprocess mode)."""
    if timeout is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise CheckFailed(
            f"{ref} ran past the timeout of {timeout:g} s in this process (inprocess mode) and "
            "was interrupted. Raise --timeout, or make the function do less."
        )

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run_in_processes(
    ref: str,
    runs: int,
    seed: int,
    deterministic: bool,
    keep_values: bool,
    timeout: float | None,
    env: dict[str, str] | None = None,
) -> list[tuple[list[Record], float]]:
    # All runs start at once: each pays for importing torch (seconds), and they share no state.
    children = [
        Child(f"{__name__}:recorded_run", (ref, seed, deterministic, keep_values), env=env)
        for _ in range(runs)
    ]
    try:
        deadline = None if timeout is None else time.monotonic() + timeout  # for all runs
        return [
            child.result(None if deadline is None else max(0.1, deadline - time.monotonic()))
            for child in children
        ]
    finally:
        for child in children:
            if child.proc.poll() is None:
                child.kill()
