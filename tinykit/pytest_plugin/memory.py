"""Memory budgets and leak checks in pytest, and the `--tinykit-memory` report.

    @pytest.mark.tinykit_limit_memory(host="200 MB", device="1 GB")
    def test_forward(model): ...

    @pytest.mark.tinykit_limit_leaks("1 MB", warmup=2, iterations=5)
    def test_step_keeps_nothing(model): ...

    def test_block(limit_memory):
        with limit_memory(host="50 MB"):
            ...

Only the call phase is measured (fixtures are built before it). Each process measures the tests
it runs, so under pytest-xdist every worker reports its own test's figure, and the figures reach
the controller in the test reports (`user_properties`), where the end-of-run report is printed.
A `tinykit_dist` test is measured on every rank: the budget holds for each rank's own peak.
Tests run untraced (a sampler and the kernel's peak counter); a failing host budget names its
top allocations from one rerun of the test under tracemalloc. What modules the test imports for
the first time take (its warm-up: the first transformers model of a worker imports its modeling
code) is measured, reported separately ("first-time imports") and subtracted before the host
budget is checked, so a test gets the same verdict whatever ran before it on the worker.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tinykit.memory.track import MemoryBudgetExceeded

LIMIT = "tinykit_limit_memory"
LEAKS = "tinykit_limit_leaks"
PROPERTY = "tinykit_memory"
RANK_INTERVAL = pytest.StashKey[float]()  # set: dist.py runs each rank under call_tracked
RANK_REPORTS = pytest.StashKey[list]()  # per-rank MemoryReport dicts, set by dist.py
FIGURES = pytest.StashKey[
    list[tuple[str, dict[str, Any]]]
]()  # (nodeid, figures) collected by the reporting process


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tinykit")
    group.addoption(
        "--tinykit-memory",
        action="store_true",
        default=False,
        help="measure every test's memory and list the tests with the highest host peaks at "
        "the end of the run, with device peaks and per-rank peaks",
    )
    group.addoption(
        "--tinykit-memory-top",
        type=int,
        default=10,
        metavar="N",
        help="how many tests the --tinykit-memory report lists (default 10)",
    )
    group.addoption(
        "--tinykit-memory-snapshots",
        default=None,
        metavar="DIR",
        help="on CUDA: record bounded memory history during budgeted tests and write a "
        "snapshot per rank into DIR when a budget fails (for pytorch.org/memory_viz)",
    )
    group.addoption(
        "--tinykit-memory-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds between RSS samples of measured tests (default 0.05)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{LIMIT}(host=None, device=None, top=5): fail when the test's host memory peak rises "
        "more than host (e.g. '200 MB'; first-time imports not counted) or a device's allocated "
        "memory more than device; a failing host budget reruns the test once under tracemalloc "
        "to name top allocations",
    )
    config.addinivalue_line(
        "markers",
        f"{LEAKS}(limit='1 MB', warmup=2, iterations=5): run the test body warmup+iterations "
        "times and fail when the memory it keeps grows by more than limit",
    )
    config.stash[FIGURES] = []
    if not hasattr(config, "workerinput"):  # xdist workers send their figures in the reports
        config.pluginmanager.register(_Collector(config), "tinykit-memory-report")


def _budgets(item: pytest.Item) -> dict[str, Any] | None:
    marker = item.get_closest_marker(LIMIT)
    if marker is None:
        return None
    kwargs = dict(marker.kwargs)
    if marker.args:
        kwargs.setdefault("host", marker.args[0])
    unknown = set(kwargs) - {"host", "device", "top"}
    if unknown:
        raise pytest.UsageError(
            f"{item.nodeid}: unknown {LIMIT} argument(s) {sorted(unknown)}. Allowed: host, "
            "device, top."
        )
    return kwargs


def _interval(config: pytest.Config) -> float:
    from tinykit.memory.track import DEFAULT_INTERVAL_S

    return config.getoption("tinykit_memory_interval") or DEFAULT_INTERVAL_S


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    __tracebackhide__ = True
    budgets = _budgets(item)
    if budgets is None and not item.config.getoption("tinykit_memory"):
        return (yield)
    from tinykit.memory.track import HOST, MemoryReport, track_memory

    interval = _interval(item.config)
    if item.get_closest_marker("tinykit_dist") is not None:
        item.stash[RANK_INTERVAL] = interval
    # No tracemalloc on this run: it slows a tiny-model training step down by ~60% (see
    # benchmarks/memory.py). A failing budget names its top allocations from a traced rerun.
    tracker = track_memory(interval=interval)
    history = _history(item) if budgets is not None else None
    try:
        with tracker as report:
            result = yield
        ranks = [MemoryReport.from_dict(r) for r in item.stash.get(RANK_REPORTS, [])]
        item.user_properties.append((PROPERTY, _figures(report, ranks)))
        if budgets is not None:
            failure = _failure(budgets, report, ranks)
            top = budgets.get("top", 5)
            if failure is not None and failure.kind == HOST and top and not ranks:
                _top_from_rerun(item, top, interval, report)
                failure = _failure(budgets, report, ranks) or failure
            if failure is not None:
                if history is not None and (path := _dump(item, history)):
                    failure.add_note(
                        f"CUDA memory snapshot: {path} (open it in pytorch.org/memory_viz)"
                    )
                raise failure
    finally:
        if history is not None:
            history.stop()
    return result


def _top_from_rerun(item: pytest.Item, top: int, interval: float, report: Any) -> None:
    """Run the test body once more under tracemalloc and put the top allocations near its
    peak into `report` (only after a host budget failed, so passing tests never pay for it).
    A body that fails the second time (state left by the first run) leaves a note instead."""
    from tinykit.memory.sizes import format_bytes
    from tinykit.memory.track import settle, track_memory

    settle()
    try:
        with track_memory(interval=interval, top=top) as again:
            item.runtest()
    except Exception as e:  # noqa: BLE001 - any error of the rerun only loses the names
        first_line = next(iter(str(e).splitlines()), "")
        report.top_source = f"not named: the traced rerun raised {type(e).__name__}: {first_line}"
        return
    report.top = again.top
    peak = format_bytes(again.host_peak_delta)
    report.top_source = f"from a traced rerun, which peaked at +{peak}"


def _history(item: pytest.Item) -> Any:
    if not item.config.getoption("tinykit_memory_snapshots"):
        return None
    from tinykit.memory.history import memory_history

    return memory_history().start()  # a no-op (it logs why) unless CUDA is in use


def _dump(item: pytest.Item, history: Any) -> Any:
    import re
    from pathlib import Path

    folder = Path(item.config.getoption("tinykit_memory_snapshots"))
    name = re.sub(r"[^\w.-]+", "_", item.nodeid)
    return history.dump(folder / f"{name}-rank{{rank}}.pickle")


def _figures(report: Any, ranks: list[Any]) -> dict[str, Any]:
    figures = {
        "host_peak_delta": report.host_peak_delta,
        "host_peak_own": report.host_peak_own,
        "import_bytes": report.import_bytes,
        "host_peak": report.host_peak,
        "device_peak_delta": report.device_peak_delta,
        "duration_s": report.duration_s,
    }
    if ranks:  # the pytest process only waited: the test's figure is its largest rank's
        figures["host_peak_delta"] = max(r.host_peak_delta for r in ranks)
        figures["host_peak"] = max(r.host_peak for r in ranks)
        devices = [r.device_peak_delta for r in ranks if r.device_peak_delta is not None]
        figures["device_peak_delta"] = max(devices, default=None)
        figures["ranks"] = [
            {"host_peak_delta": r.host_peak_delta, "device_peak_delta": r.device_peak_delta}
            for r in ranks
        ]
    return figures


def _failure(budgets: dict[str, Any], report: Any, ranks: list[Any]) -> MemoryBudgetExceeded | None:
    """The MemoryBudgetExceeded a budget of the marker raises for these reports, or None."""
    __tracebackhide__ = True
    from tinykit.memory.track import MemoryBudgetExceeded, track_memory

    checker = track_memory(host=budgets.get("host"), device=budgets.get("device"))
    try:
        for i, rank_report in enumerate(ranks):  # each rank holds the budget for itself
            try:
                checker.check(rank_report)
            except MemoryBudgetExceeded as e:
                raise MemoryBudgetExceeded(f"rank {i}: {e}", **{**e.__dict__, "rank": i}) from None
        if not ranks:
            checker.check(report)
    except MemoryBudgetExceeded as e:
        return e
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    marker = pyfuncitem.get_closest_marker(LEAKS)
    if marker is None or pyfuncitem.get_closest_marker("tinykit_dist") is not None:
        return None
    from tinykit.memory.leaks import check_leaks

    __tracebackhide__ = True
    kwargs = dict(marker.kwargs)
    if marker.args:
        kwargs.setdefault("limit", marker.args[0])
    unknown = set(kwargs) - {"limit", "warmup", "iterations", "top"}
    if unknown:
        raise pytest.UsageError(
            f"{pyfuncitem.nodeid}: unknown {LEAKS} argument(s) {sorted(unknown)}. Allowed: "
            "limit, warmup, iterations, top."
        )
    names = pyfuncitem._fixtureinfo.argnames
    funcargs = {name: pyfuncitem.funcargs[name] for name in names}
    check_leaks(lambda: pyfuncitem.obj(**funcargs), **kwargs)
    return True


@pytest.fixture
def limit_memory() -> Callable[..., Any]:
    """Factory: `with limit_memory(host="50 MB", device=None, top=5):` fails the test when the
    block's peak rises above a budget; `as m` gives the MemoryReport. The block is traced
    (top=5: tracemalloc, which slows Python allocation down; top=0 does not trace)."""
    from tinykit.memory.track import track_memory

    # a partial of a module-level class pickles: the ranks of a tinykit_dist test get it too
    return functools.partial(track_memory, top=5)


class _Collector:
    """Gathers the figures of every test report, the workers' ones too (in the controller)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            for name, value in report.user_properties:
                if name == PROPERTY and isinstance(value, dict):
                    self.config.stash[FIGURES].append((report.nodeid, value))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    from tinykit.memory.sizes import format_bytes

    if not config.getoption("tinykit_memory") or hasattr(config, "workerinput"):
        return
    n = config.getoption("tinykit_memory_top")
    figures = config.stash[FIGURES]
    rows = sorted(figures, key=lambda r: r[1]["host_peak_delta"], reverse=True)[:n]
    terminalreporter.section(f"tinykit memory: {len(rows)} highest host peaks")
    for nodeid, fig in rows:
        line = (
            f"host +{format_bytes(fig['host_peak_delta'])} (peak {format_bytes(fig['host_peak'])})"
        )
        if fig.get("import_bytes"):
            line += f" of which first-time imports +{format_bytes(fig['import_bytes'])}"
        if fig.get("device_peak_delta") is not None:
            line += f"  device +{format_bytes(fig['device_peak_delta'])}"
        if ranks := fig.get("ranks"):
            line += "  ranks: " + ", ".join(
                f"{i}: +{format_bytes(r['host_peak_delta'])}" for i, r in enumerate(ranks)
            )
        terminalreporter.write_line(f"{line}  {nodeid}")
