"""The numerics debugger in tests: the `tinykit_nan_guard` marker and fixture, `tinykit_record`.

    @pytest.mark.tinykit_nan_guard           # every module called in the test is watched
    def test_train_step(tiny_model): ...

    def test_step(tiny_model, tinykit_nan_guard):
        model, _ = tiny_model("tiny-llama")
        tinykit_nan_guard(model, warn_above=1e4)   # this model only, until the test ends

    def test_layers(tiny_model, tinykit_record):
        rec = tinykit_record(model, modules="model.layers.*")  # rec.records after the calls

A NaN/Inf fails the test with `tinykit.NumericsError`, whose message holds the frame report;
the report is also added to the test's failure output as a section. Nothing heavy is imported
until a guard or recording starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tinykit.numerics.anomaly import AnomalyDetector
    from tinykit.numerics.record import Recorder

MARKER = (
    "tinykit_nan_guard(**options): fail the test at the first NaN/Inf in any module's forward or "
    "backward (options of tinykit.detect_anomalies)"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    mark = item.get_closest_marker("tinykit_nan_guard")
    if mark is None:
        return (yield)
    from tinykit.numerics.anomaly import detect_anomalies

    with detect_anomalies(None, **mark.kwargs):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    error = call.excinfo.value if call.excinfo is not None else None
    if report.failed and type(error).__name__ == "NumericsError":
        import json

        data = {k: v for k, v in getattr(error, "report", {}).items() if k != "frames"}
        report.sections.append(("tinykit numerics", json.dumps(data, indent=1, default=str)))
    return report


@pytest.fixture
def tinykit_nan_guard() -> Iterator[Callable[..., AnomalyDetector]]:
    """`tinykit_nan_guard(model, **options)` -> the running detector, stopped at teardown."""
    with contextlib.ExitStack() as stack:

        def guard(model: Any, **options: Any) -> AnomalyDetector:
            from tinykit.numerics.anomaly import detect_anomalies

            return stack.enter_context(detect_anomalies(model, **options))

        yield guard


@pytest.fixture
def tinykit_record(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Recorder]]:
    """`tinykit_record(model, **options)` -> a running `tinykit.record`, closed at teardown.

    With `tensors="full"` and no `out`, the dump goes into a fresh temporary folder
    (`rec.sink.out`), to diff with `tinykit.diff_dumps`.
    """
    with contextlib.ExitStack() as stack:

        def start(model: Any, **options: Any) -> Recorder:
            from tinykit.numerics.record import record

            if options.get("tensors") == "full" and options.get("out") is None:
                options["out"] = tmp_path_factory.mktemp("tinykit-dump") / "dump"
            return stack.enter_context(record(model, **options))

        yield start
