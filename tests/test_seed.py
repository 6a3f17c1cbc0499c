"""seed_everything, the determinism switch, its CUDA-ordering guard, DataLoader and RNG helpers."""

from __future__ import annotations

import logging
import os
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.data import DataLoader, Dataset

import tinykit
from tinykit.errors import DeviceUnavailableError, UsageError
from tinykit.repro.seed import (
    capture_rng_state,
    check_cuda_order,
    dataloader_kwargs,
    restore_rng_state,
    seed_everything,
)


@pytest.fixture
def restore_determinism(monkeypatch):
    """seed_everything(deterministic=True) flips process-wide switches: put them back."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.delenv("TINYKIT_SEED", raising=False)
    flags = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    yield
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = flags


def _draws() -> tuple:
    return (random.random(), float(np.random.rand()), torch.rand(3).tolist())


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_same_seed_same_draws_from_every_rng(seed):
    assert seed_everything(seed) == seed
    first = _draws()
    seed_everything(seed)
    assert _draws() == first


def test_different_seeds_give_different_draws():
    seed_everything(1)
    one = _draws()
    seed_everything(2)
    assert _draws() != one


def test_the_top_level_name_is_the_same_function():
    assert tinykit.seed_everything is seed_everything
    assert tinykit.repro.seed.dataloader_kwargs is dataloader_kwargs


def test_no_seed_picks_one_logs_it_and_it_reproduces(caplog, restore_determinism):
    with caplog.at_level(logging.WARNING, logger="tinykit"):
        seed = seed_everything()
    assert f"using seed={seed}" in caplog.text and f"seed_everything({seed})" in caplog.text
    assert os.environ["TINYKIT_SEED"] == str(seed)
    first = _draws()
    seed_everything(seed)
    assert _draws() == first


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5, "7", True])
def test_bad_seeds_are_usage_errors(bad):
    with pytest.raises(UsageError, match="is not an integer in 0..4294967295"):
        seed_everything(bad)


def test_deterministic_sets_every_switch(restore_determinism):
    seed_everything(0, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_an_existing_workspace_config_is_kept(restore_determinism, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    seed_everything(0, deterministic=True)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


def test_cuda_order_guard_refuses_only_when_cuda_came_first(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    check_cuda_order(cuda_initialized=False)
    with pytest.raises(DeviceUnavailableError, match="CUDA is already initialised") as e:
        check_cuda_order(cuda_initialized=True)
    assert "CUBLAS_WORKSPACE_CONFIG=:4096:8" in str(e.value) and e.value.exit_code == 3
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    check_cuda_order(cuda_initialized=True)  # exported before start: fine


def test_seed_everything_reads_cuda_state_and_changes_nothing_when_refusing(
    restore_determinism, monkeypatch
):
    # No GPU here: stand in for "CUDA was initialised" at the one function torch answers it with.
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    seed_everything(7)
    before = _draws()
    seed_everything(7)
    with pytest.raises(DeviceUnavailableError):
        seed_everything(99, deterministic=True)
    assert _draws() == before  # not reseeded with 99
    assert not torch.are_deterministic_algorithms_enabled()
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


class _Range(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([i, random.randrange(10**6), np.random.randint(10**6)])


def _epoch(seed: int, workers: int) -> list[list[int]]:
    loader = DataLoader(
        _Range(), batch_size=2, shuffle=True, num_workers=workers, **dataloader_kwargs(seed)
    )
    return [row.tolist() for batch in loader for row in batch]


def test_dataloader_order_and_worker_draws_follow_the_seed():
    torch.manual_seed(1)  # the global RNG must not matter
    first = _epoch(seed=5, workers=2)
    torch.manual_seed(2)
    assert _epoch(seed=5, workers=2) == first
    assert [r[0] for r in _epoch(seed=6, workers=0)] != [r[0] for r in first]
    # each worker seeds Python and NumPy differently: not every sample draws the same numbers
    assert len({r[1] for r in first}) > 1 and len({r[2] for r in first}) > 1


def _train(model, opt, steps):
    for _ in range(steps):
        loss = model(torch.randn(4, 6)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


def _fresh():
    model = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5), nn.Linear(6, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.parametrize("restore_rng", [True, False])
def test_resume_matches_an_uninterrupted_run_only_with_the_rng_state(tmp_path, restore_rng):
    seed_everything(3)
    model, opt = _fresh()
    _train(model, opt, 4)
    straight = [p.detach().clone() for p in model.parameters()]

    seed_everything(3)
    model, opt = _fresh()
    _train(model, opt, 2)
    torch.save(
        {"model": model.state_dict(), "opt": opt.state_dict(), "rng": capture_rng_state()},
        tmp_path / "ckpt.pt",
    )
    seed_everything(1000)  # the resumed process starts from some other state
    ckpt = torch.load(tmp_path / "ckpt.pt")  # weights_only=True: the RNG state is plain data
    model, opt = _fresh()
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    if restore_rng:
        restore_rng_state(ckpt["rng"])
    _train(model, opt, 2)
    same = all(torch.equal(a, b) for a, b in zip(straight, model.parameters(), strict=True))
    assert same is restore_rng


def test_restore_rejects_something_else():
    with pytest.raises(UsageError, match="expected the dict from capture_rng_state"):
        restore_rng_state({"torch": torch.get_rng_state(), "jax": 1})
