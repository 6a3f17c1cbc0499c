"""`tinykit dist-check` under real torchrun: one node, and two emulated nodes on loopback."""

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


def torchrun(*args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *args,
        "-m",
        "tinykit",
        "dist-check",
        "--json",
        "--timeout",
        "60",
    ]


def _two_nodes(tmp_path, attempt: int) -> tuple[list[subprocess.Popen], list[tuple[str, str]]]:
    endpoint = f"127.0.0.1:{free_port()}"
    common = [
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        f"tinykit-test-{attempt}",
        "--max-restarts",
        "0",
    ]
    # Output goes to files, not pipes: waiting on one node while the other fills its pipe deadlocks.
    logs = [
        (tmp_path / f"try{attempt}-node{i}.out", tmp_path / f"try{attempt}-node{i}.err")
        for i in range(2)
    ]
    nodes = []
    for i, (out, err) in enumerate(logs):  # node 0 hosts the rendezvous store, as on a real cluster
        with out.open("w") as stdout, err.open("w") as stderr:
            nodes.append(
                subprocess.Popen(
                    torchrun(*common, "--rdzv-conf", f"is_host={int(i == 0)}"),
                    env=cli_env(),
                    stdout=stdout,
                    stderr=stderr,
                    text=True,
                    start_new_session=True,
                )
            )
    try:
        for node in nodes:
            node.wait(timeout=60)
    except subprocess.TimeoutExpired:
        for node in nodes:
            os.killpg(node.pid, 9)
            node.wait()
    return nodes, [(out.read_text(), err.read_text()) for out, err in logs]


def test_two_emulated_nodes_pass_the_check_through_c10d_rendezvous(tmp_path):
    # Emulating two torchrun nodes on one host is flaky in torch itself here (about 1 run in 3:
    # a rank aborts with "terminate called without an active exception", or the rendezvous
    # hangs), so the scenario gets up to 5 attempts; a real failure of dist-check fails all 5.
    for attempt in range(5):
        nodes, outputs = _two_nodes(tmp_path, attempt)
        if all(node.returncode == 0 for node in nodes):
            break
    for node, (_, err) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, err[-3000:]
    reports = [json.loads(out) for out, _ in outputs if out.strip()]
    assert len(reports) == 1  # only global rank 0 prints the JSON report
    report = reports[0]
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
