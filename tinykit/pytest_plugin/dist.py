"""Distributed tests in pytest: the `tinykit_dist` marker and `dist_launch`, `dist_env` fixtures.

    @pytest.mark.tinykit_dist(world_size=2)
    def test_all_reduce(dist_env, tmp_path):      # runs on every rank, fixtures resolved once
        t = torch.ones(1) * dist_env.rank
        dist.all_reduce(t)
        assert t.item() == 1

A marked test body runs on `world_size` rank processes (gloo on CPU, NCCL when enough GPUs are
visible; `backend="nccl"` skips without them). Fixture values are computed in the pytest process
and pickled to the ranks. Rank processes come from a warm pool kept for the session; pass
`fresh=True` (or `--tinykit-dist-fresh`) for tests that need new processes. `nodes=2,
procs_per_node=2` spreads the ranks over emulated nodes (torchrun's numbering, a local folder per
node); `fail=` injects a rank fault (`tinykit.distributed.fail`).
Nothing here imports torch until a distributed test runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

MARKER = "tinykit_dist"
MARKER_ARGS = (
    "world_size",
    "nodes",
    "procs_per_node",
    "backend",
    "timeout",
    "fresh",
    "env",
    "fail",
)
DEFAULT_TIMEOUT_S = 120.0
_REGISTRY = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tinykit")
    group.addoption(
        "--tinykit-dist-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="time limit of each distributed test once its ranks are up (default: env "
        f"TINYKIT_DIST_TIMEOUT or {DEFAULT_TIMEOUT_S:g}); a marker's timeout= wins",
    )
    group.addoption(
        "--tinykit-dist-fresh",
        action="store_true",
        default=False,
        help="start new rank processes for every distributed test instead of reusing a warm pool",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(world_size=2, nodes=1, procs_per_node=None, backend='auto', timeout=None, "
        "fresh=False, env=None, fail=None): run the test body on world_size torch.distributed "
        "ranks (gloo on CPU, NCCL on GPUs), over `nodes` emulated nodes",
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    registry = config.stash.get(_REGISTRY, None)
    if registry is not None:
        registry.close()
        del config.stash[_REGISTRY]


def _registry(config: pytest.Config) -> Any:
    if _REGISTRY not in config.stash:
        from tinykit.distributed.pool import PoolRegistry

        config.stash[_REGISTRY] = PoolRegistry()
    return config.stash[_REGISTRY]


def _timeout(config: pytest.Config, explicit: float | None) -> float:
    if explicit is not None:
        return float(explicit)
    option = config.getoption("tinykit_dist_timeout")
    if option is not None:
        return float(option)
    return float(os.environ.get("TINYKIT_DIST_TIMEOUT", DEFAULT_TIMEOUT_S))


def _marker_kwargs(item: pytest.Item) -> dict[str, Any]:
    marker = item.get_closest_marker(MARKER)
    assert marker is not None  # only called for marked items
    kwargs = dict(marker.kwargs)
    if marker.args:
        kwargs.setdefault("world_size", marker.args[0])
    unknown = set(kwargs) - set(MARKER_ARGS)
    if unknown:
        raise pytest.UsageError(
            f"{item.nodeid}: unknown {MARKER} argument(s) {sorted(unknown)}. Allowed: "
            f"{', '.join(MARKER_ARGS)}."
        )
    if "fail" in kwargs:
        kwargs["fault"] = kwargs.pop("fail")
    from tinykit.distributed.faults import Fault
    from tinykit.distributed.nodes import NodeLayout
    from tinykit.errors import UsageError

    try:  # a layout or fault that cannot work is a usage error before anything runs
        NodeLayout.of(
            kwargs.get("world_size"), kwargs.get("nodes", 1), kwargs.get("procs_per_node")
        )
        if kwargs.get("fault") is not None:
            Fault.coerce(kwargs["fault"])
    except (UsageError, TypeError) as e:
        raise pytest.UsageError(f"{item.nodeid}: {MARKER}: {e}") from None
    return kwargs


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Reject marker typos before anything runs."""
    for item in items:
        if item.get_closest_marker(MARKER) is not None:
            _marker_kwargs(item)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip before fixtures are built when the backend cannot run here."""
    if item.get_closest_marker(MARKER) is None:
        return
    kwargs = _marker_kwargs(item)
    _skip_without_devices(
        kwargs.get("backend", "auto"),
        kwargs.get("world_size"),
        kwargs.get("nodes", 1),
        kwargs.get("procs_per_node"),
    )


def _skip_without_devices(
    backend: str, world_size: int | None, nodes: int, procs_per_node: int | None
) -> None:
    """Skip (with the reason) when the backend needs more GPUs than are visible."""
    from tinykit.distributed.launch import resolve_backend
    from tinykit.distributed.nodes import NodeLayout
    from tinykit.errors import DeviceUnavailableError

    layout = NodeLayout.of(world_size, nodes, procs_per_node)
    try:
        resolve_backend(backend, layout.world_size)
    except DeviceUnavailableError as e:
        pytest.skip(str(e))


def _run(
    config: pytest.Config,
    fn: Callable[..., Any],
    *,
    world_size: int | None = None,
    nodes: int = 1,
    procs_per_node: int | None = None,
    backend: str = "auto",
    timeout: float | None = None,
    fresh: bool = False,
    env: dict[str, str] | None = None,
    fault: Any = None,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    name: str | None = None,
) -> list[Any]:
    from tinykit.distributed.launch import run_distributed
    from tinykit.errors import DistributedTestFailed

    __tracebackhide__ = True  # the message already holds the ranks' tracebacks
    try:
        return run_distributed(
            fn,
            args=args,
            kwargs=kwargs,
            world_size=world_size,
            nodes=nodes,
            procs_per_node=procs_per_node,
            backend=backend,
            timeout=_timeout(config, timeout),
            fresh=fresh or config.getoption("tinykit_dist_fresh"),
            env=env,
            fault=fault,
            registry=_registry(config),
            name=name,
        )
    except DistributedTestFailed as e:
        # pytest.skip()/xfail() called on every failing rank: report it as that, not a failure
        errors = [r["error"] or {} for r in e.per_rank if r["status"] != "ok"]
        kinds = {err.get("pytest_outcome") for err in errors}
        if kinds == {"Skipped"}:
            pytest.skip(errors[0]["message"])
        if kinds == {"XFailed"}:
            pytest.xfail(errors[0]["message"])
        raise


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if pyfuncitem.get_closest_marker(MARKER) is None:
        return None
    __tracebackhide__ = True
    names = pyfuncitem._fixtureinfo.argnames
    funcargs = {name: pyfuncitem.funcargs[name] for name in names}
    args: tuple[Any, ...] = ()
    fn = pyfuncitem.obj
    if pyfuncitem.instance is not None:  # a method: send the plain function and the instance
        fn, args = fn.__func__, (pyfuncitem.instance,)
    from tinykit.pytest_plugin.memory import RANK_INTERVAL, RANK_REPORTS

    interval = pyfuncitem.stash.get(RANK_INTERVAL, None)
    if interval is None:
        _run(
            pyfuncitem.config,
            fn,
            args=args,
            kwargs=funcargs,
            name=pyfuncitem.nodeid,
            **_marker_kwargs(pyfuncitem),
        )
        return True
    # memory is measured: every rank runs the body under track_memory and reports its peak
    from tinykit._child import FunctionRef
    from tinykit.memory.track import call_tracked

    results = _run(
        pyfuncitem.config,
        call_tracked,
        args=(FunctionRef.of(fn, "a rank process"), args, funcargs, interval),
        name=pyfuncitem.nodeid,
        **_marker_kwargs(pyfuncitem),
    )
    pyfuncitem.stash[RANK_REPORTS] = [r["memory"] for r in results]
    return True


@pytest.fixture
def dist_launch(request: pytest.FixtureRequest) -> Callable[..., list[Any]]:
    """Factory: `dist_launch(fn, *args, world_size=2, nodes=1, procs_per_node=None,
    backend="auto", timeout=None, fresh=False, env=None, fault=None, **kwargs)` runs a
    module-level `fn` on the ranks and returns the per-rank results.
    """
    config = request.config

    def launch(
        fn: Callable[..., Any],
        *args: Any,
        world_size: int | None = None,
        nodes: int = 1,
        procs_per_node: int | None = None,
        backend: str = "auto",
        timeout: float | None = None,
        fresh: bool = False,
        env: dict[str, str] | None = None,
        fault: Any = None,
        **kwargs: Any,
    ) -> list[Any]:
        __tracebackhide__ = True
        _skip_without_devices(backend, world_size, nodes, procs_per_node)
        return _run(
            config,
            fn,
            world_size=world_size,
            nodes=nodes,
            procs_per_node=procs_per_node,
            backend=backend,
            timeout=timeout,
            fresh=fresh,
            env=env,
            fault=fault,
            args=args,
            kwargs=kwargs,
        )

    return launch


@pytest.fixture
def dist_env() -> Any:
    """This rank's RANK / LOCAL_RANK / WORLD_SIZE / node / node_dir / device, read inside the
    rank (a RankInfo)."""
    from tinykit.distributed.helpers import RankInfo

    return RankInfo()
