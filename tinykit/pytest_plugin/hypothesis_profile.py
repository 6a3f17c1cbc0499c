"""Registers tinykit's Hypothesis CI profile when ``--hypothesis-profile=tinykit-ci`` asks for it.

A module of its own because it must run before Hypothesis's plugin loads the profile by name
(``tryfirst``), while the seeding in ``__init__`` must run after the cache provider is set up.
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "hypothesis_profile", None) == "tinykit-ci":
        import tinykit.strategies  # noqa: F401  (registering the profile is an import side effect)
