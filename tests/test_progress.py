"""tinykit._progress: stage lines, and the step counter of sweeps and batch builds: a rich bar
on a terminal, plain ``[n/N]`` stage lines otherwise (logs, CI, pipes)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys

from conftest import REPO

from tinykit.cli import main

STEPS = """
import time
from tinykit._progress import stage, steps, to_stderr
to_stderr()
with steps(3, "demo") as step:
    for name in ("alpha", "beta", "gamma"):
        step(name)
        stage(f"working on {name}")
        time.sleep(0.15)
print("result")
"""


def _run_on_a_terminal(code: str) -> tuple[str, str]:
    """Run ``code`` with stderr on a pseudo-terminal; (stdout, what the terminal showed)."""
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": "100"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=follower, text=True, env=env
    )
    os.close(follower)
    shown = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 30)
        try:
            chunk = os.read(leader, 4096) if ready else b""
        except OSError:  # the child closed the terminal
            chunk = b""
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, shown.decode(errors="replace")
    return out, shown.decode(errors="replace")


def test_on_a_terminal_steps_draw_a_rich_bar_and_stage_lines_scroll_above_it():
    out, shown = _run_on_a_terminal(STEPS)
    assert out == "result\n"  # stdout keeps the result alone
    assert "tinykit: demo" in shown and "━" in shown and "/3" in shown  # the bar and its count
    assert all(f"tinykit: working on {n}" in shown for n in ("alpha", "beta", "gamma"))
    assert "[1/3]" not in shown  # no plain counter lines on a terminal


def test_off_a_terminal_steps_are_plain_counter_lines():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", STEPS], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout == "result\n"
    assert proc.stderr.splitlines() == [
        "tinykit: [1/3] demo: alpha ...",
        "tinykit: working on alpha",
        "tinykit: [2/3] demo: beta ...",
        "tinykit: working on beta",
        "tinykit: [3/3] demo: gamma ...",
        "tinykit: working on gamma",
    ]
    assert "\x1b" not in proc.stderr  # no escape codes in a log


def test_fixtures_build_and_coverage_count_their_items(tmp_path, capsys):
    (tmp_path / "fx").mkdir()
    (tmp_path / "fx" / "data.toml").write_text(
        "".join(
            f'[tiny-{n}]\nkind = "synthetic_dataset"\n'
            'source = { text = { dtype = "string", _type = "Value" } }\n'
            f"spec = {{ rows = 2, seed = {i} }}\n"
            for i, n in enumerate(("a", "b"))
        )
    )
    args = ["--fixtures-dir", str(tmp_path / "fx"), "--cache-dir", str(tmp_path / "cache")]
    assert main(["fixtures", "build", *args]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "tinykit: [1/2] fixtures build: tiny-a ...",
        "tinykit: [2/2] fixtures build: tiny-b ...",
    ]
    assert main(["coverage", "llama"]) == 0
    assert "tinykit: [1/1] coverage: llama ..." in capsys.readouterr().err.splitlines()
