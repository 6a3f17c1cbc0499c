"""detect_anomalies on tiny fixtures: each injected fault is named by module, tensor kind and step.

The faults (one module each): a float16 overflow in one MLP, log(0) in a custom head, a division
by zero in one attention layer, a NaN that only backward makes (sqrt at 0), a NaN in one expert of
an MoE, and a batch whose labels are all masked. Clean models raise nothing over 100 steps.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch import nn

import tinykit
from tinykit.errors import NumericsError
from tinykit.numerics.anomaly import NumericsWarning, detect_anomalies

IDS = torch.arange(16).reshape(2, 8) % 50 + 3


@pytest.fixture(autouse=True)
def _one_thread():
    # tiny models gain nothing from intra-op threads, which spin and cost CPU on a busy machine
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _hooks() -> int:
    from torch.nn.modules import module as nn_module

    return len(nn_module._global_forward_pre_hooks) + len(nn_module._global_forward_hooks)


def _train(model: nn.Module, steps: int, batch=lambda step: {"input_ids": IDS, "labels": IDS}):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(steps):
        model(**batch(step)).loss.backward()
        opt.step()
        opt.zero_grad()


def _raised(model: nn.Module, run, **kwargs) -> dict:
    before = _hooks()
    with pytest.raises(NumericsError) as info, detect_anomalies(model, **kwargs):
        run()
    assert _hooks() == before  # removed on the exception too
    json.dumps(info.value.report)  # JSON-writable as it is
    if kwargs.get("every", 1) == 1:  # the sampled mode keeps no frames
        assert "Detected inf/nan during step=" in str(info.value)
    return info.value.report


class SqrtAtZero(nn.Module):
    """inner(x) + sqrt(relu(x) - relu(x)): finite forward, NaN gradient (inf * 0) in backward."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) + torch.sqrt(torch.relu(x) - torch.relu(x))


class LogProbHead(nn.Module):
    """A custom head returning log-probabilities, with one vocabulary column masked to 0: log(0)."""

    def __init__(self, inner: nn.Linear) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        probs = torch.softmax(self.inner(x), dim=-1)
        mask = torch.ones(probs.shape[-1]).index_fill(0, torch.tensor([7]), 0.0)
        return torch.log(probs * mask)


class DivideByNorm(nn.Module):
    """An attention layer whose output is divided by a norm that is zero: x / 0."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):
        out, weights = self.inner(*args, **kwargs)
        return out / (out - out).norm(), weights


def test_clean_models_raise_nothing_over_100_steps(tiny_model):
    model, _ = tiny_model("tiny-llama")
    with detect_anomalies(model, warn_above=1e4) as det:
        _train(model, 100)
    assert det.step == 99 and not det.anomalies and not det.warnings
    moe, _ = tiny_model("tiny-qwen3-moe")
    with detect_anomalies(moe, every=10) as det:  # sampled mode
        _train(moe, 100)
    assert det.step == 99 and not det.anomalies


def test_float16_overflow_in_one_mlp_is_warned_about_then_named(tiny_model):
    model, _ = tiny_model("tiny-llama")
    model = model.half()
    mlp = model.model.layers[1].mlp
    with torch.no_grad():  # gate and up projections of ~1e3 each: their product passes 65504
        mlp.gate_proj.weight.mul_(3e3)
        mlp.up_proj.weight.mul_(3e3)
    with pytest.warns(NumericsWarning, match="model.layers.1.mlp.gate_proj"):
        report = _raised(model, lambda: model(input_ids=IDS), warn_above=1e2)
    # act_fn(gate) * up is code in LlamaMLP.forward, not a module: down_proj receives the inf
    assert (report["module"], report["kind"], report["tensor"]) == (
        "model.layers.1.mlp.down_proj",
        "input",
        "input[0]",
    )
    assert report["made_by"] == "model.layers.1.mlp" and report["step"] == 0
    assert report["cause"] == "float16 overflow" and report["dtype"] == "float16"
    # the hint shows the numbers that matter: the operands' ranges and their weights, made by
    # the MLP's forward from gate_proj and up_proj outputs of ~1e3 each (product ~1e6 > 65504)
    ranges = report["ranges"]
    for name in ("gate_proj", "up_proj"):
        absmin, absmax = ranges[f"model.layers.1.mlp.{name}"]["output"]
        assert 5e2 < absmax < 65504 and 0 <= absmin < absmax
    hint = report["hint"]
    assert "made in the forward of 'model.layers.1.mlp' from model.layers.1.mlp.gate_proj " in hint
    assert "output |x| in [" in hint and "weight |x| in [" in hint and "abs max 0" not in hint
    assert report["frames"][-1]["module"] == "model.layers.1.mlp.down_proj"


def test_log_of_zero_in_a_custom_head_of_an_encoder_decoder(tiny_model):
    model, _ = tiny_model("tiny-bart")
    model.lm_head = LogProbHead(model.lm_head)
    report = _raised(model, lambda: model(input_ids=IDS, decoder_input_ids=IDS))
    assert (report["module"], report["class"], report["kind"]) == (
        "lm_head",
        "LogProbHead",
        "output",
    )
    assert report["neginf"] == 2 * 8 and report["nan"] == 0 and report["first_index"] == [0, 0, 7]
    # with inf=False a -inf is not an anomaly
    with detect_anomalies(model, inf=False):
        model(input_ids=IDS, decoder_input_ids=IDS)


def test_division_by_zero_in_one_attention_layer_at_a_later_step(tiny_model):
    model, _ = tiny_model("tiny-qwen3-moe")
    layer = model.model.layers[1]

    def run():
        _train(model, 2)
        layer.self_attn = DivideByNorm(layer.self_attn)
        _train(model, 1)

    report = _raised(model, run)
    assert (report["module"], report["kind"], report["step"]) == (
        "model.layers.1.self_attn",
        "output",
        2,
    )
    assert report["tensor"] == "output[0]" and report["posinf"] + report["neginf"] > 0


def test_nan_in_one_expert_names_the_experts_module_and_the_parameter(tiny_model):
    model, _ = tiny_model("tiny-qwen3-moe")
    experts = model.model.layers[0].mlp.experts
    with torch.no_grad():
        experts.down_proj[2, 0, 0] = float("nan")
    report = _raised(model, lambda: model(input_ids=IDS))
    assert (report["module"], report["kind"]) == ("model.layers.0.mlp.experts", "output")
    assert report["parameter"] == "down_proj" and report["parameter_index"] == [2, 0, 0]


def test_nan_only_in_backward_is_blamed_on_the_module_whose_backward_made_it(tiny_model):
    llava, _ = tiny_model("tiny-llava")
    tower = llava.model.vision_tower
    mlp = tower.encoder.layers[1].mlp
    mlp.activation_fn = SqrtAtZero(mlp.activation_fn)
    pixels = torch.randn(2, 3, 32, 32)
    with detect_anomalies(tower):  # the forward is finite
        tower(pixel_values=pixels)
    report = _raised(tower, lambda: tower(pixel_values=pixels).last_hidden_state.sum().backward())
    assert report["module"] == "encoder.layers.1.mlp.activation_fn"
    assert (report["pass"], report["kind"], report["tensor"]) == (
        "backward",
        "gradient passed on",
        "grad input[0]",
    )
    assert report["step"] == 0


def test_all_labels_masked_names_the_loss_and_the_trap(tiny_model):
    model, _ = tiny_model("tiny-llama")
    masked = torch.full_like(IDS, -100)
    report = _raised(
        model,
        lambda: _train(
            model, 5, lambda step: {"input_ids": IDS, "labels": IDS if step < 3 else masked}
        ),
    )
    assert (report["module"], report["tensor"], report["step"]) == (
        "LlamaForCausalLM",
        "output.loss",
        3,
    )
    assert report["cause"] == "all labels masked"


def test_abort_false_collects_and_sampled_mode_names_module_and_step(tiny_model):
    model, _ = tiny_model("tiny-llama")
    model.lm_head = LogProbHead(model.lm_head)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumericsWarning)
        with detect_anomalies(model, abort=False, frames=3, trace_steps=[1]) as det:
            for _ in range(2):
                model(input_ids=IDS)
    assert [a["module"] for a in det.anomalies] == ["lm_head", "lm_head"]
    assert len(det.anomalies[0]["frames"]) == 3  # the ring buffer holds frames=3, no more
    called = [m for m in model.modules() if not isinstance(m, nn.ModuleList)]  # lists never run
    assert len(det.traced[1]) == len(called)  # every call of the traced step, not 3
    # each with its abs-min / abs-max, as a frame shows them
    assert all(r.outputs and r.outputs[0].absmax is not None for r in det.traced[1])
    report = _raised(model, lambda: [model(input_ids=IDS) for _ in range(4)], every=2)
    assert (report["module"], report["step"]) == ("lm_head", 0)


def test_it_runs_inside_a_recorder_and_is_exported_lazily():
    from tinykit.numerics.record import Recorder

    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    with Recorder() as outer, tinykit.detect_anomalies(model):
        model(torch.ones(1, 2)).sum().backward()
    assert [r.module for r in outer.records if r.kind == "forward"] == ["0", "1", "Sequential"]
    assert tinykit.NumericsError is NumericsError


def test_the_old_positional_options_still_work_for_one_release_and_say_the_new_form():
    model = nn.Sequential(nn.Linear(2, 2), LogOfZero())
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new form does not warn
        with pytest.raises(NumericsError), detect_anomalies(model, inf=True):
            model(torch.ones(1, 2))
    # 0.1's detect_anomalies(model, grads, inf, warn_above, abort): abort=False collects
    new_form = (
        r"detect_anomalies\(model, grads=\.\.\., inf=\.\.\., warn_above=\.\.\., abort=\.\.\.\)"
    )
    with (
        pytest.warns(DeprecationWarning, match=new_form),
        pytest.warns(NumericsWarning),
        detect_anomalies(model, True, True, None, False) as det,
    ):
        model(torch.ones(1, 2))
    assert [a["module"] for a in det.anomalies] == ["1"]
    with pytest.raises(TypeError, match="multiple values for inf"):
        detect_anomalies(model, True, True, inf=False)
    with pytest.raises(TypeError, match="at most 7 positional"):
        detect_anomalies(model, *[True] * 7)


class LogOfZero(nn.Module):
    def forward(self, x):
        return torch.log(x - x)
