"""`tinykit coverage --jobs N`: the sweep shared among worker processes gives the same rows, in
the same order, as the sweep in one process."""

from __future__ import annotations

import json
import subprocess
import sys

from tinykit.cli import main
from tinykit.coverage.sweep import sweep, sweep_in_processes

TYPES = ["bert", "opt", "gpt2"]


def test_worker_processes_give_the_rows_of_one_process_in_plan_order():
    alone = list(sweep(TYPES))
    shared = list(sweep_in_processes(TYPES, None, jobs=2))
    assert [r.model_type for r in shared] == TYPES
    assert [(r.ok, r.reason, r.params, r.weight_bytes) for r in shared] == [
        (r.ok, r.reason, r.params, r.weight_bytes) for r in alone
    ]
    assert all(r.ok for r in shared), [r.reason for r in shared]


def test_the_cli_reports_the_wall_time_beside_the_per_type_seconds():
    # Reformer's forward prints "Warning: ... is not a recognized input" to stdout: it must not
    # reach the report, in a worker process or in this one
    for jobs in ("2", "1"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tinykit",
                "coverage",
                "bert",
                "reformer",
                "--jobs",
                jobs,
                "--json",
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert [r["model_type"] for r in report["rows"]] == ["bert", "reformer"]
        assert "is not a recognized input" in done.stderr
    assert report["passed"] == 2 and report["wall_seconds"] > 0


def test_no_workers_and_unknown_types_are_usage_errors(capsys):
    assert main(["coverage", "bert", "--jobs", "0"]) == 2
    assert "--jobs 0: give 1 or more worker processes." in capsys.readouterr().err
    assert main(["coverage", "bert", "nosuchtype", "--jobs", "2"]) == 2
    assert "Unknown model type(s) nosuchtype" in capsys.readouterr().err
