"""A downstream repo's training tests: tiny Qwen3 MoE + its tokenizer + tiny dataset + AdamW.

Nothing here knows how the fixtures are made: `tiny_model`, `tiny_tokenizer` and
`tiny_dataset` come from the tinykit plugin, are built once (for all tests and xdist workers)
and cached on disk.
"""

from __future__ import annotations

import pytest
import torch


def collate(tokenizer, texts: list[str | None], length: int = 12) -> dict[str, torch.Tensor]:
    """The repo's collator: pad/truncate to `length`, labels -100 on padding."""
    texts = ["x" + (t or "") for t in texts]  # never an empty row
    batch = tokenizer(
        texts, padding="max_length", truncation=True, max_length=length, return_tensors="pt"
    )
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    return dict(batch)


def train_step(model, optimizer, batch):
    model.train()
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


@pytest.mark.parametrize("batch_start", [0, 4, 8, 12])
def test_an_optimizer_step_lowers_the_loss_on_its_batch(
    tiny_model, tiny_tokenizer, tiny_dataset, batch_start
):
    model, _ = tiny_model("tiny-qwen3-moe")
    tokenizer, _ = tiny_tokenizer("tiny-qwen3-moe")
    data, _ = tiny_dataset("tiny-text")
    assert len(tokenizer) == model.config.vocab_size
    batch = collate(tokenizer, data["train"]["text"][batch_start : batch_start + 4])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = train_step(model, optimizer, batch)
    with torch.no_grad():
        after = model(**batch).loss.item()
    assert after < before


def test_every_expert_and_the_router_get_gradients(tiny_model, tiny_tokenizer, tiny_dataset):
    model, _ = tiny_model("tiny-qwen3-moe")
    tokenizer, _ = tiny_tokenizer("tiny-qwen3-moe")
    data, _ = tiny_dataset("tiny-text")
    model(**collate(tokenizer, data["train"]["text"])).loss.backward()
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
