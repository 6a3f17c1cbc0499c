"""The verdict of a real-client run (tests/clients/client_run.py) on a real junit report, a real
loopback Hub's request log and a real audit hook."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import datasets  # noqa: F401  (imported before pytester snapshots sys.modules: use_endpoint
import pytest  # imports it, and a re-import after the snapshot's restore re-registers pyarrow types)
from huggingface_hub import hf_hub_download

sys.path.insert(0, str(Path(__file__).parent / "clients"))
import client_run  # noqa: E402

from tinykit.hub.client import use_endpoint  # noqa: E402
from tinykit.hub.server import HubServer  # noqa: E402

SUITE = """
import pytest
def test_passes(): pass
def test_fails(): assert False
@pytest.mark.skip(reason="not here")
def test_skipped(): pass
"""


@pytest.fixture
def run(pytester, tmp_path):
    """A junit report of a suite with one pass, one failure, one skip; a served hub folder."""
    pytester.makepyfile(test_suite=SUITE)
    pytester.runpytest_subprocess(f"--junitxml={tmp_path / 'junit.xml'}", "-p", "no:cacheprovider")
    (tmp_path / "suite").symlink_to(pytester.path)
    (tmp_path / "hub" / "org" / "served").mkdir(parents=True)
    (tmp_path / "hub" / "org" / "served" / "config.json").write_text("{}")
    return tmp_path


def _check(run: Path, known: str, *, unserved: bool = False) -> tuple[int, str]:
    lines: list[str] = []
    hub = HubServer(run / "hub", on_request=lambda r: lines.append(str(r)))
    with hub, use_endpoint(hub.endpoint, cache_dir=run / "hf"):
        hf_hub_download("org/served", "config.json")
        if unserved:
            with pytest.raises(Exception, match="404"):
                hf_hub_download("org/missing", "config.json")
    (run / "server.log").write_text("\n".join(lines) + "\n")
    (run / "known.txt").write_text(known)
    args = ["check", "--junit", str(run / "junit.xml"), "--server-log", str(run / "server.log")]
    args += ["--audit-log", str(run / "audit.log"), "--hub", str(run / "hub")]
    args += ["--known", str(run / "known.txt"), "--repos-out", str(run / "repos.txt")]
    args += ["--rootdir", str(run / "suite")]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = client_run.main(args)
    return code, out.getvalue()


def test_a_known_failure_passes_and_the_counts_are_printed(run):
    code, out = _check(run, "test_suite.py::test_fails  # fails on purpose\n")
    assert "3 collected, 1 passed, 1 skipped, 1 failed" in out
    assert "known failure: test_suite.py::test_fails  # fails on purpose" in out
    assert code == 0 and "client run: PASS" in out
    assert (run / "repos.txt").read_text() == "model org/served\n"


def test_a_new_failure_or_an_unserved_repo_fails(run):
    code, out = _check(run, "# nothing known\n")
    assert code == 1 and "NEW failure: test_suite.py::test_fails" in out
    code, out = _check(run, "test_suite.py::test_fails  # fails on purpose\n", unserved=True)
    assert code == 1 and "(repo not served)" in out and "/org/missing/" in out


def test_a_known_failure_without_a_reason_is_refused(run):
    with pytest.raises(SystemExit, match="has no reason"):
        _check(run, "test_suite.py::test_fails\n")


def test_the_audit_hook_records_a_non_loopback_connect_only(tmp_path):
    client_run.write_hook(tmp_path / "hook")
    log = tmp_path / "audit.log"
    code = (
        "import socket\n"
        "for host in ('127.0.0.1', '192.0.2.1'):\n"  # TEST-NET-1: never routed
        "    s = socket.socket(); s.settimeout(0.01)\n"
        "    try: s.connect((host, 9))\n"
        "    except OSError: pass\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "hook"), "TINYKIT_AUDIT_LOG": str(log)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and "192.0.2.1" in lines[0]
