"""A downstream repo's training tests: tiny Qwen3 MoE + tiny dataset + a real AdamW step.

Nothing here knows how the fixtures are made: `tiny_model` and `tiny_dataset` come from the
tinykit plugin, are built once (for all tests and xdist workers) and cached on disk.
"""

from __future__ import annotations

import pytest
import torch


def encode(texts: list[str], vocab: int, length: int = 12) -> torch.Tensor:
    """Bytes -> ids (the repo's stand-in tokenizer); missing texts are empty; padded with id 1."""
    rows = [[1] + [2 + b % (vocab - 2) for b in (t or "").encode()][: length - 1] for t in texts]
    return torch.tensor([r + [1] * (length - len(r)) for r in rows])


def train_step(model, optimizer, input_ids):
    model.train()
    loss = model(input_ids=input_ids, labels=input_ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


@pytest.mark.parametrize("batch_start", [0, 4, 8, 12])
def test_an_optimizer_step_lowers_the_loss_on_its_batch(tiny_model, tiny_dataset, batch_start):
    model, _ = tiny_model("tiny-qwen3-moe")
    data, _ = tiny_dataset("tiny-text")
    ids = encode(data["train"]["text"][batch_start:batch_start + 4], model.config.vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = train_step(model, optimizer, ids)
    with torch.no_grad():
        after = model(input_ids=ids, labels=ids).loss.item()
    assert after < before


def test_every_expert_and_the_router_get_gradients(tiny_model, tiny_dataset):
    model, _ = tiny_model("tiny-qwen3-moe")
    data, _ = tiny_dataset("tiny-text")
    ids = encode(data["train"]["text"], model.config.vocab_size)
    model(input_ids=ids, labels=ids).loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    assert all(g is not None and bool(g.abs().sum() > 0) for g in grads.values())
    assert any("mlp.gate" in name for name in grads)  # the router is trained too


def test_each_test_gets_a_fresh_copy(tiny_model):
    trained, path = tiny_model("tiny-qwen3-moe")
    with torch.no_grad():
        next(trained.parameters()).add_(1.0)
    fresh, same_path = tiny_model("tiny-qwen3-moe")
    assert same_path == path
    assert not torch.equal(next(trained.parameters()), next(fresh.parameters()))
