"""The tinykit_dist marker and fixtures, exercised through inner pytest sessions (pytester)."""

from __future__ import annotations

import pytest
import torch

INNER_TESTS = """
import os
import pytest
import torch
import torch.distributed as dist


@pytest.fixture
def payload():
    return {"scale": 3}


@pytest.mark.tinykit_dist(world_size=2)
def test_ranks_see_env_and_fixtures(dist_env, payload, tmp_path):
    assert dist.is_initialized() and dist.get_world_size() == 2
    assert (dist_env.rank, dist_env.world_size) == (dist.get_rank(), 2)
    assert os.environ["MASTER_ADDR"] == "127.0.0.1" and os.environ["MASTER_PORT"].isdigit()
    t = torch.ones(1) * payload["scale"]
    dist.all_reduce(t)
    assert t.item() == 6
    (tmp_path / f"rank{dist_env.rank}").write_text(str(os.getpid()))


@pytest.mark.tinykit_dist(world_size=2)
@pytest.mark.parametrize("n", [1, 2])
def test_parametrized(n, dist_env):
    t = torch.tensor([float(n)])
    dist.all_reduce(t)
    assert t.item() == 2 * n


class TestInAClass:
    factor = 5

    @pytest.mark.tinykit_dist(world_size=2)
    def test_method(self):
        t = torch.ones(1) * self.factor
        dist.all_reduce(t)
        assert t.item() == 10


@pytest.mark.tinykit_dist(world_size=2)
def test_rank_one_fails(dist_env):
    print("about to check")
    assert dist_env.rank == 0, "rank one disagrees"


@pytest.mark.tinykit_dist(world_size=2, backend="nccl")
def test_needs_gpus():
    pass


@pytest.mark.tinykit_dist(world_size=2)
def test_skips_on_every_rank():
    pytest.skip("not on this platform")


def pid_and_rank():
    return os.getpid(), dist.get_rank()


def test_launch_fixture_reuses_the_warm_ranks(dist_launch):
    first = dist_launch(pid_and_rank)
    again = dist_launch(pid_and_rank)
    assert [r for _, r in first] == [0, 1]
    print("SAME" if first == again else "DIFFERENT")
"""


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="expects the NCCL test to skip")
def test_marker_runs_the_body_on_every_rank_and_reports_failures(pytester):
    pytester.makepyfile(test_inner=INNER_TESTS)
    basetemp = pytester.path / "bt"
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "-s", "--basetemp", str(basetemp))
    result.assert_outcomes(passed=5, failed=1, skipped=2)
    for line in [
        "*test_rank_one_fails on 2 ranks (gloo) failed: rank 1 raised AssertionError: rank one*",
        "*--- rank 1 traceback ---*",
        "*[[]rank 0[]] about to check*",
        "*[[]rank 1[]] about to check*",
        "*SAME*",  # dist_launch reused the warm ranks
        "*needs 2 visible GPUs; found 0*",
        "*not on this platform*",
    ]:
        result.stdout.fnmatch_lines([line])
    # fixture values (tmp_path) were built once in pytest and used by both ranks
    written = sorted(p.name for p in basetemp.rglob("rank*"))
    assert written == ["rank0", "rank1"]


def test_timeout_and_fresh_options(pytester):
    pytester.makepyfile(
        test_inner="""
import os
import pytest, torch, torch.distributed as dist

def pid():
    return os.getpid()

def test_fresh_ranks_every_time(dist_launch):
    print("SAME" if dist_launch(pid) == dist_launch(pid) else "DIFFERENT")

@pytest.mark.tinykit_dist(world_size=2)
def test_hangs():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))
"""
    )
    result = pytester.runpytest("-s", "--tinykit-dist-timeout", "3", "--tinykit-dist-fresh")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*DIFFERENT*"])
    result.stdout.fnmatch_lines(
        [
            "*timed out after 3 s: rank(s) 0, 1 were still running*",
            "*--- rank 0 Python stacks (still running) ---*",
            "*in test_hangs*",
        ]
    )


def test_xdist_workers_each_run_their_own_two_rank_tests(pytester):
    pytester.makepyfile(
        test_inner="""
import os
import pytest
import torch
import torch.distributed as dist

@pytest.mark.tinykit_dist(world_size=2)
@pytest.mark.parametrize("i", range(4))
def test_all_reduce(i):
    t = torch.ones(1) * (i + dist.get_rank())
    dist.all_reduce(t)
    assert t.item() == 2 * i + 1
    assert os.environ["PYTEST_XDIST_WORKER"] in ("gw0", "gw1")
"""
    )
    result = pytester.runpytest_subprocess("-n", "2", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*gw0*PASSED*"], consecutive=False)
    result.stdout.fnmatch_lines(["*gw1*PASSED*"], consecutive=False)


def test_unknown_marker_argument_is_a_usage_error(pytester):
    pytester.makepyfile(
        test_inner="""
import pytest

@pytest.mark.tinykit_dist(world_sise=2)
def test_typo():
    pass
"""
    )
    result = pytester.runpytest()
    assert result.ret != 0
    result.stderr.fnmatch_lines(
        ["ERROR: *test_typo: unknown tinykit_dist argument(s) *world_sise*"]
    )


def test_plugin_is_silent_and_light_without_distributed_tests(pytester):
    pytester.makeconftest("""
import sys

def pytest_sessionfinish():
    print("HEAVY:", sorted({"torch", "transformers", "datasets"} & set(sys.modules)))
""")
    pytester.makepyfile(test_plain="def test_a():\n    print('plain')\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-W", "error")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*HEAVY: [[][]]"])
    assert "tinykit" not in result.stdout.str() and not result.stderr.str().strip()


def test_a_dist_test_trains_a_tiny_model_on_two_ranks(pytester, tmp_path):
    pytester.makepyfile("""
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


@pytest.mark.tinykit_dist(world_size=2)
def test_ddp_step(tiny_model, dist_env):
    # rank 1 builds the fixture (transformers' save_pretrained writes on rank 0 only), then rank 0
    # finds it in the cache
    if dist_env.rank == 1:
        model, path = tiny_model("tiny-llama")
    dist.barrier()
    if dist_env.rank == 0:
        model, path = tiny_model("tiny-llama")
    assert path.is_dir() and model.config.num_hidden_layers == 2
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ids = torch.randint(0, model.config.vocab_size, (2, 8))  # rank-seeded: differs per rank
    losses = []
    for _ in range(2):
        loss = ddp(input_ids=ids + dist_env.rank, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[1] < losses[0]
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(2)]
    dist.all_gather(gathered, flat)
    assert torch.equal(gathered[0], gathered[1])  # DDP kept the replicas in step
""")
    result = pytester.runpytest_subprocess(
        f"--tinykit-cache-dir={tmp_path / 'cache'}", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)
