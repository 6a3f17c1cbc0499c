"""tinykit.numerics.record: stacking recorders, hook cleanup, and what a backward record holds."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tinykit.numerics.record import Recorder, probe


def _step(model: nn.Module) -> None:
    model(torch.ones(3, 4, requires_grad=True)).square().sum().backward()


def _hook_count() -> int:
    from torch.nn.modules import module as nn_module

    return len(nn_module._global_forward_pre_hooks) + len(nn_module._global_forward_hooks)


def test_two_recorders_at_once_both_see_every_call():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    before = _hook_count()
    with Recorder() as outer:
        _step(model)
        with Recorder() as inner:
            _step(model)
            probe("here", torch.zeros(1))
    keys = [(r.module, r.kind) for r in inner.records]
    assert [(r.module, r.kind) for r in outer.records][-len(keys) :] == keys  # seen by both
    assert len(outer.records) == 2 * len(keys) - 1  # the first step, and the inner run
    assert ("here", "probe") in keys and len(keys) == 2 * 4 + 1
    assert _hook_count() == before


def test_hooks_are_removed_when_the_body_raises():
    model = nn.Linear(4, 2)
    before = _hook_count()
    with pytest.raises(RuntimeError, match="on purpose"), Recorder() as rec:
        out = model(torch.ones(1, 4))
        raise RuntimeError("on purpose")
    assert _hook_count() == before
    out.sum().backward()  # the tensor hook registered while recording is gone too
    assert [r.kind for r in rec.records] == ["forward"]


def test_a_backward_record_holds_the_gradient_received_and_the_one_passed_on():
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    x = torch.ones(1, 4, requires_grad=True)
    with Recorder(keep_values=True) as rec:
        y = model(x)
        y.backward(torch.tensor([[1.0, 2.0]]))
    grads = {r.module: r for r in rec.records if r.kind == "grad"}
    second = grads["1"]
    assert second.inputs[0].values.tolist() == [1.0, 2.0]  # d loss / d output of layer 1
    expected = torch.tensor([1.0, 2.0]) @ model[1].weight  # what layer 1 passes on
    assert torch.equal(second.outputs[0].values, expected.detach())
    assert torch.equal(grads["0"].outputs[0].values, x.grad.reshape(-1))


def test_an_input_shared_with_another_consumer_gets_only_this_module_s_share():
    class Residual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(2, 2, bias=False)

        def forward(self, x):
            return x + self.inner(x)

    model = Residual()
    x = torch.ones(1, 2, requires_grad=True)
    with Recorder(keep_values=True) as rec:
        model(x).sum().backward()
    grads = [r for r in rec.records if r.kind == "grad"]
    assert [r.module for r in grads] == ["inner", "Residual"]  # the child's record first
    inner, outer = grads
    # x's total gradient is 1 + column sums of W; the Linear's share is only the column sums
    assert torch.allclose(inner.outputs[0].values, model.inner.weight.sum(0).detach())
    assert torch.allclose(x.grad.reshape(-1), 1 + model.inner.weight.sum(0).detach())
    # the block's share is all of it: the Linear's node and the add both read x inside it
    assert torch.allclose(outer.outputs[0].values, x.grad.reshape(-1))


def test_a_retained_graph_gives_one_backward_record_per_backward():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    with Recorder() as rec:
        loss = model(torch.ones(1, 2, requires_grad=True)).sum()
        loss.backward(retain_graph=True)
        loss.backward()
    grads = [r.key for r in rec.records if r.kind == "grad" and r.module == "0"]
    assert grads == [("0", "grad", 0), ("0", "grad", 1)]


def test_a_finished_step_leaves_nothing_behind():
    """The backward hooks must not keep a step's outputs (and so its graph) alive: a cycle
    through autograd's C++ nodes is one no collector frees (it grew a detector by ~90 KB a step
    on the tiny decoder)."""
    import gc
    import weakref

    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    with Recorder() as rec:
        refs = []
        for _ in range(3):
            y = model(torch.ones(2, 4, requires_grad=True))
            refs.append(weakref.ref(y))
            y.sum().backward()
            del y
        gc.collect()
        assert [r() for r in refs] == [None, None, None]
        assert (
            len([r for r in rec.records if r.kind == "grad"]) == 3 * 4
        )  # the Sequential and its three layers
