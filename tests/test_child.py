"""tinykit._child: one way to call "module:function" in a fresh interpreter, on real processes."""

from __future__ import annotations

import os
import time

import child_cases
import pytest

from tinykit._child import FunctionRef, resolve, run_in_child, start_child
from tinykit.errors import ChildProcessFailed, UsageError


def test_the_result_comes_back_from_another_interpreter():
    assert run_in_child("child_cases:add", 2, 3, scale=10) == 50
    pid, has_torch = run_in_child(FunctionRef.of(child_cases.interpreter))
    assert pid != os.getpid() and has_torch is False


def test_children_run_at_the_same_time():
    start = time.monotonic()
    children = [start_child("child_cases:sleep", 1.5) for _ in range(3)]
    assert [c.result(timeout=60) for c in children] == [None, None, None]
    assert time.monotonic() - start < 4.0  # three in a row would take at least 4.5 s


def test_the_childs_exception_is_raised_here_with_its_traceback():
    with pytest.raises(ZeroDivisionError) as e:
        run_in_child("child_cases:divide_by_zero")
    (note,) = e.value.__notes__
    assert "Traceback in the child process running child_cases:divide_by_zero" in note
    assert "return 1 / 0" in note


def test_an_exception_that_cannot_cross_is_described():
    with pytest.raises(ChildProcessFailed, match="raised child_cases.Unpicklable: holds a lock"):
        run_in_child("child_cases:raise_unpicklable")
    with pytest.raises(TypeError, match="pickle"):
        run_in_child("child_cases:return_unpicklable")


def test_a_child_that_dies_is_a_clear_error():
    with pytest.raises(ChildProcessFailed, match="exited with code 3 without a result") as e:
        run_in_child("child_cases:die")
    assert e.value.returncode == 3 and not e.value.timed_out


def test_a_child_past_its_timeout_is_killed():
    start = time.monotonic()
    with pytest.raises(ChildProcessFailed, match="ran past its timeout of 1 s") as e:
        run_in_child("child_cases:sleep", 60, timeout=1)
    assert e.value.timed_out and time.monotonic() - start < 30


def test_a_script_path_reference(tmp_path):
    script = tmp_path / "test.py"  # the name of a stdlib package: the file must still win
    script.write_text("def answer(x):\n    return x * 2\n")
    assert run_in_child(f"{script}:answer", 21) == 42
    assert resolve(f"{script}:answer")(1) == 2


def test_bad_references_are_usage_errors():
    with pytest.raises(UsageError, match="not a function reference"):
        resolve("no_colon")
    with pytest.raises(UsageError, match="cannot load 'child_cases:nope'"):
        resolve("child_cases:nope")
    with pytest.raises(UsageError, match="not a function"):
        resolve("child_cases:os")
    with pytest.raises(UsageError, match="lambda, a nested function"):
        FunctionRef.of(lambda: None)
    with pytest.raises(UsageError, match="cannot load 'child_cases:nope'"):
        run_in_child("child_cases:nope")
