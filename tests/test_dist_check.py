"""`tinykit dist-check`: local ranks, and two emulated nodes of real torchrun agents on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tinykit.cli import main
from tinykit.distributed.ports import RANGE_END, RANGE_START, SLICE, free_port, port_is_free

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    env["GLOO_SOCKET_IFNAME"] = "lo"  # the emulated nodes talk over loopback
    return env


def test_two_emulated_nodes_pass_the_check_through_torchrun_agents():
    """`--nodes 2`: one real torchrun agent per node, c10d rendezvous on a store the launcher
    hosts on 127.0.0.1, each node's report gathered on rank 0. (The hand-made recipe this test
    used before, node 0's agent hosting the store, needed up to 5 attempts; with the launcher's
    store 9 runs of 9 passed here, so there is no retry.)"""
    proc = subprocess.run(
        [sys.executable, "-m", "tinykit", "dist-check", "--nodes", "2", "--nproc", "1", "--json"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["ok"] and report["world_size"] == 2
    assert sorted(r["node_rank"] for r in report["ranks"]) == [0, 1]
    assert [r["local_rank"] for r in report["ranks"]] == [0, 0]  # one rank per emulated node
    assert all(r["all_reduce"] == 2 for r in report["ranks"])
    assert report["versions"]["backend"] == "gloo"


def test_without_torchrun_it_starts_local_ranks(capsys):
    assert main(["dist-check", "--nproc", "2", "--timeout", "60"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"[{os.uname().nodename}:0] is OK (global rank: 0/2, node 0, cpu")
    assert out[1].startswith(f"[{os.uname().nodename}:1] is OK (global rank: 1/2")
    assert out[2] == f"torch={torch.__version__} backend=gloo"


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="asserts the no-GPU path")
def test_nccl_without_gpus_is_one_line_and_exit_code_3():
    proc = subprocess.run(
        [sys.executable, "-m", "tinykit", "dist-check", "--backend", "nccl"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        "tinykit: error: DeviceUnavailableError: backend='nccl' with world_size=2"
    )


def test_free_ports_are_bindable_and_distinct():
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == 20
    assert all(port_is_free(p) for p in ports)


@given(worker=st.integers(min_value=0, max_value=200))
def test_each_xdist_worker_gets_its_own_slice_of_ports(worker):
    n_slices = (RANGE_END - RANGE_START) // SLICE
    old = os.environ.get("PYTEST_XDIST_WORKER")
    os.environ["PYTEST_XDIST_WORKER"] = f"gw{worker}"
    try:
        port = free_port()
    finally:
        if old is None:
            del os.environ["PYTEST_XDIST_WORKER"]
        else:
            os.environ["PYTEST_XDIST_WORKER"] = old
    base = RANGE_START + (worker % n_slices) * SLICE
    assert base <= port < base + SLICE < 32768  # below the kernel's ephemeral ports
