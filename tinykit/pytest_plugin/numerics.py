"""The numerics debugger in tests: the `tinykit_nan_guard` and `tinykit_record` markers and
fixtures.

    @pytest.mark.tinykit_nan_guard           # every module called in the test is watched
    def test_train_step(tiny_model): ...

    @pytest.mark.tinykit_record(out="dumps/{name}")   # every module called, into a dump
    def test_train(): train()                          # (a model built inside train() too)

    def test_step(tiny_model, tinykit_nan_guard):
        model, _ = tiny_model("tiny-llama")
        tinykit_nan_guard(model, warn_above=1e4)   # this model only, until the test ends

    def test_layers(tiny_model, tinykit_record):
        rec = tinykit_record(model, modules="model.layers.*")  # rec.records after the calls

A NaN/Inf fails the test with `tinykit.NumericsError`, whose message holds the frame report;
the report is also added to the test's failure output as a section. The markers need no fixture
argument and no model object: the first root module with parameters the test calls is the
model. The record marker's dump folder (`out`, "{name}" being the test's name; default a new
folder under the session's temporary directory) is in the test report's "tinykit record"
section and its `user_properties`. Nothing heavy is imported until a guard or recording starts.
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


RECORD_MARKER = (
    "tinykit_record(**options): record every module called in the test into a dump (options of "
    "tinykit.record; out='dumps/{name}' picks the folder, default a temporary one)"
)
DUMP = "tinykit_dump"  # the user_properties key of the record marker's dump folder


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER)
    config.addinivalue_line("markers", RECORD_MARKER)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    guard = item.get_closest_marker("tinykit_nan_guard")
    recording = item.get_closest_marker("tinykit_record")
    if guard is None and recording is None:
        return (yield)
    with contextlib.ExitStack() as stack:
        if recording is not None:
            from tinykit.numerics.record import record

            options = dict(recording.kwargs)
            out = _dump_folder(item, options.pop("out", None))
            item.user_properties.append((DUMP, str(out)))
            stack.enter_context(record(out=out, **options))
        if guard is not None:
            from tinykit.numerics.anomaly import detect_anomalies

            stack.enter_context(detect_anomalies(**guard.kwargs))
        return (yield)


def _dump_folder(item: pytest.Item, out: Any) -> Any:
    import re
    from pathlib import Path

    name = re.sub(r"[^\w.-]+", "_", item.name)
    if out is None:
        factory = item.config._tmp_path_factory  # type: ignore[attr-defined]
        return factory.mktemp("tinykit-dump") / name
    return Path(str(out).replace("{name}", name))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    if call.when == "call":
        for key, value in item.user_properties:
            if key == DUMP:
                report.sections.append(("tinykit record", f"dump: {value}"))
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
