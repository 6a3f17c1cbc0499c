"""Shared test setup: real inputs from ../shared, an isolated HF cache, torch imported once."""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

import pytest

# Import torch once in the outer process: an in-process pytester run that imports it a second
# time can crash the whole session (shared/docs/style.md B.8).
import torch  # noqa: F401


def _loopback(host: object) -> bool:
    if host in (None, "localhost", "") or not isinstance(host, str | bytes):
        return True
    try:
        return ipaddress.ip_address(host if isinstance(host, str) else host.decode()).is_loopback
    except ValueError:
        return False


def _no_network(event: str, args: tuple) -> None:
    """Fail any test that looks up or connects to anything but this machine (the Hub is offline)."""
    if event == "socket.connect" and isinstance(args[1], tuple) and not _loopback(args[1][0]):
        raise ConnectionRefusedError(f"tinykit tests never leave loopback: connect to {args[1]!r}")
    if event == "socket.getaddrinfo" and not _loopback(args[0]):
        raise ConnectionRefusedError(f"tinykit tests never leave loopback: lookup of {args[0]!r}")


sys.addaudithook(_no_network)

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


@pytest.fixture(scope="session")
def coverage_classes() -> dict[str, str]:
    """type -> the transformers class a whole-group sweep builds it with (`coverage.plan`)."""
    from tinykit.coverage.sweep import plan

    return plan(every=True)[2]
