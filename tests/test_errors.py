"""The error hierarchy: stdlib mixins for callers' except clauses, pickling across processes."""

from __future__ import annotations

import pickle

import pytest

from tinykit import errors

CLASSES = [c for c in vars(errors).values()
           if isinstance(c, type) and issubclass(c, errors.TinykitError)]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_error_pickles_with_its_attributes(cls):
    e = cls("what failed. why. what next.", field="hidden", value=3)
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is cls and str(again) == str(e)
    assert (again.field, again.value) == ("hidden", 3)


def test_exit_codes_follow_the_family():
    assert errors.ShrinkConstraintError("x").exit_code == 2
    assert errors.HubError("x").exit_code == 3
    assert errors.TinyArtifactInvalid("x").exit_code == 1


def test_stdlib_mixins_keep_existing_except_clauses_working():
    assert issubclass(errors.UsageError, ValueError)
    assert issubclass(errors.HubError, OSError)
    assert issubclass(errors.OfflineCacheMiss, FileNotFoundError)
    assert issubclass(errors.CheckFailed, AssertionError)
