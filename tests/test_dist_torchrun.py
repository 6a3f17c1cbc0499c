"""Whole programs on emulated nodes through real torchrun agents (`run_torchrun`, `tinykit
launch`): the layout the pool emulates, elastic restart after a killed rank, the time limit
with stacks, and no process left behind, also when the launcher itself is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import torch
from dist_cases import LAYOUT_VARS, layout, train_in_one_process
from test_dist_nodes import assert_resumed_like

from tinykit.distributed import fail, run_torchrun
from tinykit.distributed.processes import tagged

CASES = str(Path(__file__).with_name("dist_cases.py"))
REPO = str(Path(__file__).resolve().parents[1])


def with_mark(mark: str) -> dict[str, str]:
    """This environment plus a variable every descendant inherits, to find strays by."""
    return dict(
        os.environ,
        TINYKIT_TEST_MARK=mark,
        PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]),
    )


def marked(mark: str) -> list[int]:
    found = []
    for p in psutil.process_iter(["status"]):
        try:
            if (
                p.info["status"] != psutil.STATUS_ZOMBIE
                and p.environ().get("TINYKIT_TEST_MARK") == mark
            ):
                found.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def test_torchrun_on_two_nodes_gives_the_layout_the_pool_emulates(tmp_path, dist_launch):
    job = run_torchrun(
        [sys.executable, CASES, "layout"],
        nodes=2,
        nproc_per_node=2,
        workdir=tmp_path,
        timeout=240,
        echo=False,
    )
    real = [json.loads(job.rank_lines(rank)[0]) for rank in range(4)]
    emulated = dist_launch(layout, nodes=2, procs_per_node=2)
    for rank in range(4):
        assert {k: real[rank][k] for k in LAYOUT_VARS} == {
            k: emulated[rank][k] for k in LAYOUT_VARS
        }
    for rank, seen in enumerate(real):
        node = tmp_path / f"node{rank // 2}"
        assert (seen["TMPDIR"], seen["HF_HOME"]) == (str(node / "tmp"), str(node / "hf_home"))
        assert seen["mark"] == str(rank // 2)  # written by its own node's local rank 0
    assert any(text.startswith("[node1 rank3] {") for _, _, text in job.lines)
    assert job.returncodes == [0, 0] and tagged(job.tag) == []


@pytest.mark.parametrize("resume", ["fixed", "buggy"])
def test_a_rank_killed_at_step_3_resumes_after_one_elastic_restart(resume, tmp_path):
    """2 nodes × 2 ranks of DDP; rank 1 is SIGKILLed at step 3; torchrun restarts the job once
    and it must end with an uninterrupted run's weights (the same training in this process, as
    DDP computes it; the pool's uninterrupted 2×2 run is compared in test_dist_nodes). The buggy
    resume (momentum lost) must not."""
    shared = tmp_path / "run" / "shared"
    job = run_torchrun(
        [sys.executable, CASES, "train", str(shared), resume],
        nodes=2,
        nproc_per_node=2,
        max_restarts=1,
        fault=fail(rank=1, at=3),
        workdir=tmp_path / "run",
        timeout=300,
        echo=False,
    )
    assert "tinykit: injected fault: rank 1 killed (SIGKILL) at step 3" in job.output
    # node 0 lost a rank and counts one restart. Node 1 restarts too: its agent counts one when
    # its own ranks saw the broken collective first, none when it saw node 0 rejoin first (a race)
    assert job.rank_lines(1) == ["resumed at step 3 (restart 1)"]
    assert job.rank_lines(2) in (
        ["resumed at step 3 (restart 0)"],
        ["resumed at step 3 (restart 1)"],
    )
    assert job.returncodes == [0, 0] and tagged(job.tag) == []
    reference = train_in_one_process()
    final = torch.load(shared / "final.pt")
    if resume == "fixed":
        assert_resumed_like(final, reference)
    else:
        with pytest.raises(AssertionError, match="Tensor-likes are not close"):
            assert_resumed_like(final, reference)


HANG = "import time\ndef wait_for_a_peer():\n    time.sleep(600)\nwait_for_a_peer()\n"


def test_a_hung_job_times_out_with_every_workers_stack_and_leaves_nothing(tmp_path):
    mark = uuid.uuid4().hex
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tinykit",
            "launch",
            "--nodes",
            "2",
            "--nproc-per-node",
            "1",
            "--timeout",
            "30",
            "--",
            sys.executable,
            "-c",
            HANG,
        ],
        env=with_mark(mark),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert time.monotonic() - started < 30 + 60
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tinykit: error: DistributedTestFailed: `")
    assert "on 2 node(s) × 1 rank(s) (torchrun) timed out after 30 s" in last
    for rank in (0, 1):  # faulthandler's dump of each worker, through torchrun's tee
        lines = [
            line
            for line in proc.stderr.splitlines()
            if line.startswith(f"[node{rank} rank{rank}] ")
        ]
        assert any("line 3 in wait_for_a_peer" in line for line in lines), proc.stderr[-3000:]
    assert marked(mark) == []


OWNER = """
import sys
from tinykit.distributed import run_torchrun
run_torchrun([sys.executable, "-c", sys.argv[1]], nodes=2, nproc_per_node=1, timeout=300)
"""
SLEEPER = "import os, pathlib, sys, time\npathlib.Path({d!r}, str(os.getpid())).write_text('')\ntime.sleep(600)\n"


def test_killing_the_launcher_takes_every_agent_and_worker_with_it(tmp_path):
    mark = uuid.uuid4().hex
    pids = tmp_path / "pids"
    pids.mkdir()
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, SLEEPER.format(d=str(pids))],
        env=with_mark(mark),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(list(pids.iterdir())) == 2, "the workers did not start"
    assert len(marked(mark)) >= 5  # launcher, 2 agents, 2 workers
    owner.send_signal(signal.SIGKILL)  # like a CI timeout killing pytest: no cleanup runs
    owner.wait()
    deadline = time.monotonic() + 20
    while marked(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marked(mark) == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["launch"], "no program to launch. Put it after --"),
        (["launch", "--fail", "rank=1", "--", "python", "t.py"], "needs rank=N and at=POINT"),
        (["launch", "--nodes", "9", "--", "python", "t.py"], "9 is out of range: use 1 to 8"),
    ],
)
def test_launch_usage_errors_are_one_line_and_exit_2(argv, message, capsys):
    from tinykit.cli import main

    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
