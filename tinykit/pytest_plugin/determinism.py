"""Fixture `assert_deterministic`: fail a test when two seeded runs of a function differ.

    def test_two_steps_are_deterministic(assert_deterministic):
        assert_deterministic(mypkg.train.two_steps, mode="inprocess")

It wraps `tinykit.check_determinism`; the failure is its NondeterminismError (an AssertionError),
whose message names the first diverging module. Nothing heavy is imported until the fixture is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tinykit.numerics.determinism import DeterminismReport


@pytest.fixture
def assert_deterministic() -> Callable[..., DeterminismReport]:
    """`assert_deterministic(fn, runs=2, mode="process", atol=0, seed=0, deterministic=False)`."""

    def check(fn: Callable[[], Any] | str, **kwargs: Any) -> DeterminismReport:
        from tinykit.numerics.determinism import check_determinism

        __tracebackhide__ = True  # the report is in the message; the frames inside tinykit are not
        return check_determinism(fn, **kwargs)

    return check
