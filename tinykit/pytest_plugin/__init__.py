"""The `tinykit` pytest plugin (entry point `pytest11`): options, markers and fixtures.

Loading it must stay cheap and silent: it is auto-loaded in every environment where tinykit
is installed, so nothing here (or in the fixture modules it imports) imports torch,
transformers or datasets at module level.
"""

from __future__ import annotations

import pkgutil

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("tinykit", "tinykit: tiny fixtures and reproducibility")

# Every public module of this package is a fixture module (found automatically; `_*.py` are
# private). pytest imports the modules listed in `pytest_plugins` of a registered plugin.
pytest_plugins = sorted(
    f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")
)
