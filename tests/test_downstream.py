"""Acceptance: a downstream repo using only the plugin trains a tiny Qwen3 MoE under xdist -n 2."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO
from tinykit.artifacts.cache import Cache

DOWNSTREAM = REPO / "tests" / "downstream"


def test_downstream_training_tests_pass_under_xdist_with_fixtures_built_once(tmp_path):
    env = {**os.environ, "TINYKIT_CACHE": str(tmp_path / "cache")}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(DOWNSTREAM / "pytest.ini"),
        "--rootdir",
        str(DOWNSTREAM),
        str(DOWNSTREAM),
        "-n",
        "2",
        "-v",
        "-p",
        "no:cacheprovider",
    ]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "6 passed" in out.stdout
    assert "[gw0]" in out.stdout and "[gw1]" in out.stdout  # both workers ran tests
    builds = Cache(tmp_path / "cache").builds()
    assert sorted((b["kind"], b["source"]) for b in builds) == [
        ("model", "qwen3_moe"),
        ("synthetic_dataset", '{"text": {"_type": "Value", "dtype": "string"}}'),
    ]
