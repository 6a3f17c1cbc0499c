"""Shared test setup: real inputs from ../shared, an isolated HF cache, torch imported once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Import torch once in the outer process: an in-process pytester run that imports it a second
# time can crash the whole session (shared/docs/style.md B.8).
import torch  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TINYKIT_SHARED", REPO.parent / "shared"))
HUB_FILES = SHARED / "hub-files"
# A sample downstream repo with its own pytest.ini: tests/test_downstream.py runs it as a session.
collect_ignore = ["downstream"]


@pytest.fixture(autouse=True)
def _isolated_hf_home(tmp_path_factory, monkeypatch):
    """No test reads or writes the user's Hugging Face cache."""
    home = tmp_path_factory.getbasetemp() / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("TINYKIT_CACHE", str(tmp_path_factory.getbasetemp() / "tinykit-cache"))
