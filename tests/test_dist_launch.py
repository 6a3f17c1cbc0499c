"""tinykit.distributed launcher and pool: real gloo ranks on CPU, real failures, hangs and processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest
import torch
import torch.distributed as dist

from tinykit.distributed import (
    PoolRegistry,
    assert_equal_on_all_ranks,
    print_rank,
    rank_zero_first,
    resolve_backend,
    run_distributed,
)
from tinykit.distributed.pool import POOL_TAG_VAR
from tinykit.errors import CheckFailed, DeviceUnavailableError, DistributedTestFailed, UsageError

GLOBAL_BATCH, SEQ = 8, 6


def processes_tagged(tag: str) -> set[int]:
    """Live (non-zombie) processes started by the pool whose tag is `tag`, wherever they are now."""
    found = set()
    for p in psutil.process_iter(["status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and p.environ().get(POOL_TAG_VAR) == tag:
                found.add(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


# ---- functions that run on the ranks (module level, so ranks can import them) --------------


def tiny_lm():
    """A tiny next-token model in plain torch (no transformers import: ~6 s per rank here)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Embedding(64, 16),
        torch.nn.Linear(16, 32),
        torch.nn.GELU(),
        torch.nn.LayerNorm(32),
        torch.nn.Linear(32, 64),
    )


def global_batch():
    return torch.randint(0, 64, (GLOBAL_BATCH, SEQ), generator=torch.Generator().manual_seed(1))


def sgd_step(model, input_ids):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    logits = model(input_ids[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), input_ids[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def ddp_train_step():
    from torch.nn.parallel import DistributedDataParallel

    rank, world = dist.get_rank(), dist.get_world_size()
    model = DistributedDataParallel(tiny_lm())
    shard = global_batch().chunk(world)[rank]
    params = sgd_step(model, shard)
    for name, value in params.items():
        assert_equal_on_all_ranks(value, name=name)
    return {k.removeprefix("module."): v for k, v in params.items()}


def fail_on_rank_one():
    if dist.get_rank() == 1:
        raise ValueError("boom from rank 1")
    t = torch.ones(1)
    dist.all_reduce(t)  # rank 0 waits here for a peer that has left
    return t.item()


def mismatched_collectives(pid_file):
    if dist.get_rank() == 1:
        child = subprocess.Popen(["sleep", "600"])  # must not outlive the test either
        pid_file.write_text(f"{child.pid} {os.environ[POOL_TAG_VAR]}")
        dist.recv(torch.zeros(1), src=0)  # waits for a send rank 0 never makes
    else:
        dist.all_reduce(torch.ones(1))  # waits for rank 1 to join the all-reduce
    return "unreachable"


def die():
    import signal

    if dist.get_rank() == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(3)


def rank_pid():
    return os.getpid()


def chatty():
    import sys

    print(f"hello stdout {dist.get_rank()}")
    print(f"hello stderr {dist.get_rank()}", file=sys.stderr)
    print_rank("via print_rank")
    return os.environ["MASTER_ADDR"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"]


def rank_dependent_tensor():
    assert_equal_on_all_ranks(torch.tensor([1.0, float(dist.get_rank())]), name="weights")


def ordered_by_rank_zero_first(path):
    with rank_zero_first():
        if dist.get_rank() == 0:
            time.sleep(0.3)  # rank 1 would win the race without the ordering
            path.write_text("written by rank 0")
        return path.read_text()


def rank_zero_fails_first():
    with rank_zero_first():
        if dist.get_rank() == 0:
            raise OSError("download failed")
    return "ok"


# ---- tests ------------------------------------------------------------------------------


def test_ddp_step_on_two_ranks_equals_single_process_on_global_batch(dist_launch):
    per_rank = dist_launch(ddp_train_step, world_size=2)

    single = sgd_step(tiny_lm(), global_batch())
    assert per_rank[0].keys() == single.keys()
    for name, expected in single.items():
        assert torch.equal(per_rank[0][name], per_rank[1][name]), name
        torch.testing.assert_close(per_rank[0][name], expected, msg=name)
    assert not torch.equal(per_rank[0]["4.weight"], tiny_lm()[4].weight)  # the step did move


def test_a_failing_rank_fails_the_run_with_its_traceback_and_discards_the_pool(dist_launch):
    before = dist_launch(rank_pid)
    start = time.monotonic()
    with pytest.raises(DistributedTestFailed) as info:
        dist_launch(fail_on_rank_one, world_size=2, timeout=60)
    assert time.monotonic() - start < 30  # the survivor is not left waiting for the 60 s limit
    assert set(dist_launch(rank_pid)).isdisjoint(before)  # the next run gets new ranks
    message = str(info.value)
    assert (
        "fail_on_rank_one on 2 ranks (gloo) failed: rank 1 raised ValueError: boom from rank 1"
    ) in message
    assert "--- rank 1 traceback ---" in message
    assert 'raise ValueError("boom from rank 1")' in message
    assert info.value.timed_out is False
    assert info.value.per_rank[1]["status"] == "error"  # rank 0 then fails in its all_reduce


def test_a_hang_times_out_with_every_rank_stack_and_leaves_no_process(dist_launch, tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    start = time.monotonic()
    with pytest.raises(DistributedTestFailed) as info:
        dist_launch(mismatched_collectives, pid_file, world_size=2, timeout=4)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert info.value.timed_out is True
    assert "timed out after 4 s: rank(s) 0, 1 were still running" in message
    for rank, frame in ((0, "all_reduce"), (1, "recv")):
        stack = info.value.per_rank[rank]["stack"]
        assert "most recent call first" in stack
        assert "in mismatched_collectives" in stack and f"in {frame}" in stack
        assert f"--- rank {rank} Python stacks (still running) ---" in message
    assert elapsed < 4 + 15
    grandchild, tag = pid_file.read_text().split()
    assert not _running(int(grandchild))
    assert processes_tagged(tag) == set()  # no rank, no grandchild: zero processes left


def test_ranks_that_die_are_reported_with_their_exit_status(dist_launch):
    with pytest.raises(DistributedTestFailed) as info:
        dist_launch(die, world_size=2, timeout=30)
    message = str(info.value)
    assert "rank 0 was killed by signal 9 before returning" in message
    assert "rank 1 exited with code 3 before returning" in message
    assert [r["exit_code"] for r in info.value.per_rank] == [-9, 3]


def random_draws():
    import random

    return torch.rand(2), random.random()


def test_ranks_start_from_the_callers_rng_state(dist_launch):
    torch.manual_seed(123)
    import random

    random.seed(7)
    per_rank = dist_launch(random_draws)
    expected_t, expected_py = torch.rand(2), random.random()
    for t, py in per_rank:
        assert torch.equal(t, expected_t) and py == expected_py


def test_output_of_every_rank_is_captured_and_prefixed(dist_launch, capsys):
    results = dist_launch(chatty, world_size=2)
    assert results == [("127.0.0.1", "2", "0"), ("127.0.0.1", "2", "1")]
    out = capsys.readouterr().out.splitlines()
    for rank in (0, 1):
        assert f"[rank {rank}] hello stdout {rank}" in out
        assert f"[rank {rank}] hello stderr {rank}" in out
        assert f"[rank {rank}] via print_rank" in out  # not "[rank 0] [rank 0] ..."


def test_warm_pool_reuses_ranks_and_fresh_mode_does_not(dist_launch):
    first = dist_launch(rank_pid)
    again = dist_launch(rank_pid)
    assert first == again and len(set(first)) == 2
    fresh = dist_launch(rank_pid, fresh=True)
    assert set(fresh).isdisjoint(first)
    assert not any(psutil.pid_exists(p) for p in fresh)  # fresh ranks are gone once it returns


def test_closing_the_registry_stops_its_ranks():
    pools = PoolRegistry()
    pids = run_distributed(rank_pid, world_size=2, registry=pools)
    pools.close()
    assert not any(psutil.pid_exists(p) for p in pids)


def test_assert_equal_on_all_ranks_fails_on_every_rank_when_values_differ(dist_launch):
    with pytest.raises(DistributedTestFailed) as info:
        dist_launch(rank_dependent_tensor)
    for rank in (0, 1):
        error = info.value.per_rank[rank]["error"]
        assert error["type"] == "tinykit.errors.CheckFailed"
        assert "weights is not equal on all 2 ranks" in error["message"]
        assert "rank 1 max|Δ|=1" in error["message"]


def test_rank_zero_first_runs_rank_zero_before_the_others(dist_launch, tmp_path):
    assert dist_launch(ordered_by_rank_zero_first, tmp_path / "f") == ["written by rank 0"] * 2


def test_rank_zero_first_fails_the_other_ranks_instead_of_hanging(dist_launch):
    with pytest.raises(DistributedTestFailed) as info:
        dist_launch(rank_zero_fails_first, timeout=30)
    assert info.value.timed_out is False
    assert "OSError: download failed" in info.value.per_rank[1]["error"]["message"]
    assert isinstance(info.value.per_rank[1]["error"]["exception"], CheckFailed)


def test_nested_functions_and_unpicklable_arguments_are_usage_errors():
    def nested():
        return 1

    with pytest.raises(UsageError, match="Define it at module level"):
        run_distributed(nested)
    with pytest.raises(UsageError, match=r"argument\(s\) lock .*must pickle"):
        import threading

        run_distributed(rank_pid, kwargs={"lock": threading.Lock()})


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="asserts the no-GPU path")
def test_nccl_without_gpus_is_a_device_error_and_auto_falls_back_to_gloo():
    assert resolve_backend("auto", 2) == "gloo"
    with pytest.raises(DeviceUnavailableError, match="needs 2 visible GPUs; found") as info:
        resolve_backend("nccl", 2)
    assert info.value.required == 2
    with pytest.raises(UsageError, match="Unknown distributed backend 'mpi'"):
        resolve_backend("mpi", 2)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs for NCCL")
def test_nccl_all_reduce_on_two_gpus(dist_launch):
    assert dist_launch(nccl_sum, world_size=2, backend="nccl") == [3.0, 3.0]


def nccl_sum():
    t = torch.ones(1, device=f"cuda:{os.environ['LOCAL_RANK']}") * (dist.get_rank() + 1)
    dist.all_reduce(t)
    return t.item()


def busy_forever(pid_dir):
    (pid_dir / str(os.getpid())).write_text("")
    time.sleep(600)


def test_busy_ranks_exit_when_the_pytest_process_is_killed(tmp_path):
    """The lifeline: a SIGKILLed parent (CI timeout) must not leave ranks running a test."""
    script = tmp_path / "owner.py"
    script.write_text(
        "import os, pathlib, signal, sys, threading, time\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import test_dist_launch as t\n"
        "from tinykit.distributed import PoolRegistry, run_distributed\n"
        "pid_dir = pathlib.Path(sys.argv[2])\n"
        "job = dict(args=(pid_dir,), registry=PoolRegistry())\n"
        "threading.Thread(target=run_distributed, args=(t.busy_forever,), kwargs=job,\n"
        "                 daemon=True).start()\n"
        "while len(list(pid_dir.iterdir())) < 2:\n"
        "    time.sleep(0.05)\n"
        "os.kill(os.getpid(), signal.SIGKILL)  # no atexit, no cleanup\n"
    )
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    proc = subprocess.run(
        [sys.executable, str(script), os.path.dirname(__file__), str(pid_dir)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    pids = [int(p.name) for p in pid_dir.iterdir()]
    assert len(pids) == 2
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.1)
    assert not any(_running(p) for p in pids)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
