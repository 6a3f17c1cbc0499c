"""Run a function on N ranks with torch.distributed: gloo on CPU, NCCL when enough GPUs are visible.

    >>> from tinykit.distributed import run_distributed
    >>> run_distributed(my_module.step, world_size=2, timeout=60)  # doctest: +SKIP
    [<rank 0 return value>, <rank 1 return value>]

The function must be importable (defined at module level, e.g. in a test module); it runs in rank
processes with the variables torchrun sets (RANK, LOCAL_RANK, GROUP_RANK, WORLD_SIZE, ...) and
the default process group initialised. Its return values, exceptions and output come back to the
caller. `nodes=2` spreads the ranks over emulated nodes, each with its own local folder:

    >>> run_distributed(my_module.step, nodes=2, procs_per_node=2)  # doctest: +SKIP
"""

from __future__ import annotations

import inspect
import pickle
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tinykit._child import FunctionRef
from tinykit._devices import gpu_count
from tinykit.distributed.faults import Fault
from tinykit.distributed.nodes import NodeLayout
from tinykit.distributed.pool import DEFAULT_REGISTRY, PoolRegistry, RankOutcome, RankPool
from tinykit.errors import DeviceUnavailableError, DistributedTestFailed, UsageError

BACKENDS = ("auto", "gloo", "nccl")


def resolve_backend(backend: str, world_size: int) -> str:
    """ "auto" → "nccl" when at least `world_size` GPUs are visible, else "gloo".

    Counting GPUs does not initialise CUDA in this process (`torch.cuda.device_count`).

    Raises:
        DeviceUnavailableError: "nccl" was asked for and fewer than `world_size` GPUs are visible.
        UsageError: unknown backend or a world size below 1.
    """
    if backend not in BACKENDS:
        raise UsageError(
            f"Unknown distributed backend {backend!r}. Expected one of {', '.join(BACKENDS)}. "
            "Use backend='auto' to get NCCL on GPUs and gloo on CPU."
        )
    if world_size < 1:
        raise UsageError(f"world_size={world_size} is not a number of ranks. Pass world_size >= 1.")
    if backend == "gloo":
        return "gloo"
    gpus = gpu_count("cuda")
    if gpus >= world_size:
        return "nccl"
    if backend == "auto":
        return "gloo"
    raise DeviceUnavailableError(
        f"backend='nccl' with world_size={world_size} needs {world_size} visible GPUs; found {gpus}"
        " (CUDA_VISIBLE_DEVICES and torch.cuda.device_count()). Run on a machine with enough GPUs,"
        " or use backend='auto' to fall back to gloo on CPU.",
        required=world_size,
        found=gpus,
    )


def _payload(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> bytes:
    target: Any = fn
    if inspect.isfunction(fn):
        if "<locals>" in fn.__qualname__ or fn.__name__ == "<lambda>":
            raise UsageError(
                f"{fn.__qualname__} cannot run on ranks: rank processes import functions by "
                "module and name, and this one is a lambda or nested function. Define it at "
                "module level (a test module is fine)."
            )
        module = sys.modules.get(fn.__module__)
        target = FunctionRef(fn.__module__, fn.__qualname__, getattr(module, "__file__", None))
    try:
        return pickle.dumps((target, tuple(args), dict(kwargs)))
    except Exception as e:
        bad = [k for k, v in kwargs.items() if not _picklable(v)]
        where = f"argument(s) {', '.join(bad)}" if bad else "the function or its arguments"
        raise UsageError(
            f"Cannot send {where} of {getattr(fn, '__qualname__', fn)} to the ranks: {e}. "
            "Ranks are separate processes, so every argument (and fixture value) must pickle. "
            "Pass a path or a config instead and build the object inside the function."
        ) from e


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


def run_distributed(
    fn: Callable[..., Any],
    *,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    world_size: int | None = None,
    nodes: int = 1,
    procs_per_node: int | None = None,
    backend: str = "auto",
    timeout: float = 120.0,
    fresh: bool = False,
    env: dict[str, str] | None = None,
    fault: Fault | str | dict[str, Any] | None = None,
    registry: PoolRegistry | None = None,
    name: str | None = None,
) -> list[Any]:
    """Call `fn(*args, **kwargs)` on `world_size` ranks and return the per-rank results.

    Args:
        fn: a module-level function (or any picklable callable).
        world_size: number of ranks, all on this host (default 2, or nodes × procs_per_node).
        nodes: emulated nodes; ranks are numbered node by node as torchrun does, and every node
            gets its own folder (`RankInfo.node_dir`), TMPDIR and HF_HOME beside one shared folder
            (`RankInfo.shared_dir`); under NCCL, its own CUDA_VISIBLE_DEVICES group.
        procs_per_node: ranks per node (default world_size / nodes).
        backend: "auto" (NCCL if `world_size` GPUs are visible, else gloo), "gloo" or "nccl".
        timeout: seconds for the whole job once the ranks are up; a hang fails after this.
        fresh: start new rank processes for this call and stop them after, instead of reusing
            a warm pool (for tests that change process-wide state).
        env: extra environment variables for the ranks (part of the warm pool's key).
        fault: a `fail(rank=, at=)` to inject in this job (the job then fails, and the pool
            with it, when the fault kills or raises).
        registry: where warm pools live (default: one per Python process, closed at exit).
        name: how the failure message names the call (default: the function's qualified name).

    Returns:
        `[rank 0 result, rank 1 result, ...]`.

    Raises:
        DistributedTestFailed: a rank raised, died or did not finish in time. The message holds
            the failing rank's traceback and the Python stacks of hung ranks; `.per_rank` holds
            the same as data and `.timed_out` says whether the time limit was hit.
        DeviceUnavailableError: backend="nccl" without enough GPUs.
        UsageError: a world size the nodes do not divide, or a malformed fault.
    """
    __tracebackhide__ = True  # pytest: the message already holds the ranks' tracebacks
    layout = NodeLayout.of(world_size, nodes, procs_per_node)
    world_size = layout.world_size
    backend = resolve_backend(backend, world_size)
    payload = _payload(fn, args, kwargs or {})
    job_env = Fault.coerce(fault).env() if fault is not None else None
    registry = registry or DEFAULT_REGISTRY
    if fresh:
        pool = RankPool(world_size, backend, env, nodes=layout.nodes)
    else:
        pool = registry.get(world_size, backend, env, nodes=layout.nodes)
    try:
        outcomes = pool.run(payload, timeout=timeout, job_env=job_env)
    finally:
        if fresh:
            pool.close()
    failed = [o for o in outcomes if o.status != "ok"]
    if failed and not fresh:
        registry.discard(pool)
    _replay_output(outcomes)
    if failed:
        raise _failure(
            str(name or getattr(fn, "__qualname__", repr(fn))), backend, timeout, outcomes, layout
        )
    return [o.value for o in outcomes]


def _replay_output(outcomes: list[RankOutcome]) -> None:
    """Print every rank's captured lines, so pytest shows them under 'Captured stdout call'."""
    for o in outcomes:
        for line in o.output:
            print(line)
    sys.stdout.flush()


def _summary(o: RankOutcome) -> str:
    if o.status == "error" and o.error and _left_early(o):
        return f"rank {o.rank} called sys.exit(0) before returning (it left the job)"
    if o.status == "error" and o.error:
        return f"rank {o.rank} raised {o.error['type'].rsplit('.', 1)[-1]}: {o.error['message']}"
    if o.status == "died":
        code = o.exit_code or 0
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        if code == 0:  # sys.exit(0) or os._exit(0) in the function: not a crash, a departure
            return f"rank {o.rank} exited early with code 0 before returning (it left the job)"
        return f"rank {o.rank} {how} before returning"
    return f"rank {o.rank} was still running"


# A rank killed by one of these faulted itself; SIGABRT and SIGKILL may come from a peer's
# teardown (gloo aborts when a peer vanishes) or from the cleanup after the first failure.
CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE})


def _blame_order(o: RankOutcome) -> tuple[bool, bool, bool, float]:
    """A rank that exited with code 0 before returning left the job: it is the cause, whatever
    the clocks say (its peers then raise in a collective, and their errors carry the ranks' own
    times while its exit is seen later, here). So is a rank that died (killed, crashed): peers
    of a dead rank raise, they do not die; among dead ranks, one that crashed (SIGSEGV, ...)
    before one aborted or killed. Otherwise the first failure is the likely cause."""
    crashed = o.status == "died" and -(o.exit_code or 0) in CRASH_SIGNALS
    return (not _left_early(o), o.status != "died", not crashed, o.failed_at)


def _left_early(o: RankOutcome) -> bool:
    """Exited with code 0 (os._exit(0)) or raised SystemExit(0) (sys.exit()) before returning."""
    if o.status == "died":
        return o.exit_code == 0
    error = o.error or {}
    return error.get("type", "").endswith("SystemExit") and error.get("message") in (
        "",
        "0",
        "None",
    )


def _failure(
    name: str, backend: str, timeout: float, outcomes: list[RankOutcome], layout: NodeLayout
) -> Exception:
    failed = sorted((o for o in outcomes if o.status in ("error", "died")), key=_blame_order)
    hung = [o for o in outcomes if o.status == "hung"]
    per_rank = [
        {
            "rank": o.rank,
            "status": o.status,
            "error": o.error,
            "exit_code": o.exit_code,
            "stack": o.stack,
            "output": o.output,
        }
        for o in outcomes
    ]
    world = f"{name} on {len(outcomes)} ranks ({backend})"
    if layout.nodes > 1:
        world = f"{name} on {layout} ({backend})"
    if failed:
        first = failed[0]  # the first rank to fail is the likely cause
        where = f" (node {layout.node_of(first.rank)})" if layout.nodes > 1 else ""
        head = f"{world} failed: {_summary(first)}{where}."
        advice = (
            f"Fix the error in rank {first.rank}'s traceback below; what the other ranks "
            "report is usually a consequence (a peer left a collective)."
        )
    else:
        ids = ", ".join(str(o.rank) for o in hung)
        head = f"{world} timed out after {timeout:g} s: rank(s) {ids} were still running."
        advice = (
            "The Python stacks below show where each rank waits; ranks stuck in different "
            "collectives (or one rank skipping a collective) is the usual cause. If the "
            "code is only slow, raise the limit: timeout=... (marker "
            "tinykit_dist(timeout=...) or --tinykit-dist-timeout)."
        )
    sections = [head, advice]
    for o in outcomes:
        if o.status == "error" and o.error:
            sections.append(f"--- rank {o.rank} traceback ---\n{o.error['traceback'].rstrip()}")
        elif o.status == "died":
            tail = "\n".join(o.output[-15:])
            sections.append(f"--- {_summary(o)}; last output ---\n{tail}")
        elif o.status == "hung":
            sections.append(
                f"--- rank {o.rank} Python stacks (still running) ---\n"
                f"{o.stack or '(no stack: the process did not answer SIGUSR1)'}"
            )
    return DistributedTestFailed(
        "\n".join(sections),
        per_rank=per_rank,
        timed_out=not failed and bool(hung),
    )
