"""tinykit.record dumps, diff_dumps and `tinykit dumps diff`, describe, and the pytest fixtures.

The diff cases: one layer's computation perturbed by 1e-3 (that layer is the first divergence,
later layers are downstream), its weights perturbed instead (the parameter is named, not the
layer), a recording against itself (no divergence), a recording with one extra module call
(reported, the right first divergence still named), and a dump written by another process. Bad input (not a dump, different models, a truncated shard) gives one line, exit != 0.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap

import pytest
import torch

import tinykit
from tinykit.cli import main
from tinykit.errors import UsageError

IDS = torch.arange(16).reshape(2, 8) % 50 + 3
pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # bitwise-stable reductions, and no spinning threads on a busy box
    yield
    torch.set_num_threads(threads)


def _record(model, out, **kwargs):
    with tinykit.record(model, tensors="full", out=out, **kwargs) as rec:
        model(input_ids=IDS, labels=IDS).loss.backward()
    model.zero_grad()
    return rec


@contextlib.contextmanager
def perturbed(model):
    """Layer 1's down_proj computes its output + 1e-3 (same inputs, same weights)."""
    down = model.model.layers[1].mlp.down_proj
    down.forward = lambda x, forward=down.forward: forward(x) + 1e-3
    try:
        yield
    finally:
        del down.forward


@pytest.fixture
def llama_dumps(tiny_model, tmp_path):
    """(model, folder of the model, reference dump, dump with layer 1's down_proj perturbed)."""
    model, path = tiny_model("tiny-llama")
    _record(model, tmp_path / "a")
    with perturbed(model):
        _record(model, tmp_path / "b")
    return model, path, tmp_path / "a", tmp_path / "b"


def test_perturbed_weights_are_named_as_the_parameter_not_the_layer(llama_dumps, tmp_path):
    model, _, a, _ = llama_dumps
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.add_(1e-3)
    _record(model, tmp_path / "weights")
    result = tinykit.diff_dumps(a, tmp_path / "weights")
    root = result.root
    assert (root.kind, root.tensor, root.step) == (
        "params",
        "model.layers.1.mlp.down_proj.weight",
        0,
    )
    assert (root.mismatched, root.total, root.tensors_differing) == (64 * 32, 64 * 32, 1)
    assert "differs at the start of step 0 (2048 of 2048 elements)" in result.text()
    assert "initialised or loaded differently" in result.text()
    # the layer that reads it is not blamed: what it computes follows from the weights
    assert {r.status for r in result.rows if r.module.startswith("model.layers.1.mlp")} <= {
        "match",
        "downstream",
    }


def test_a_perturbed_layer_is_the_first_divergence_and_later_layers_are_downstream(llama_dumps):
    _, _, a, b = llama_dumps
    result = tinykit.diff_dumps(a, b)
    assert not result.equal
    assert (result.root.module, result.root.kind) == ("model.layers.1.mlp.down_proj", "forward")
    assert "its output differs while its inputs and the step's parameters matched" in result.text()
    assert "Mismatched elements: " in result.root.detail
    assert "Greatest absolute difference" in result.root.detail
    status = {(r.module, r.kind): r.status for r in result.rows}
    assert status["model.layers.0", "forward"] == "match"
    assert status["model.layers.1.mlp.up_proj", "forward"] == "match"
    assert status["model.layers.1", "forward"] == "contains-root"
    assert status["model.norm", "forward"] == status["lm_head", "forward"] == "downstream"
    downstream_modules = {r.module for r in result.downstream}
    assert "model.norm" in downstream_modules
    changed = {r.module for r in result.rows if r.status != "match" and r.kind == "forward"}
    assert "model.layers.0.mlp" not in changed and "model.layers.1.self_attn" not in changed
    manifest = json.loads((a / "manifest.json").read_text())
    assert manifest["version"] == 1 and manifest["records"] == len(result.rows)
    assert manifest["versions"]["torch"] == torch.__version__.split("+")[0] or manifest["versions"]
    assert (a / "env.json").exists()


def test_a_recording_against_itself_has_no_divergence(llama_dumps):
    _, _, a, _ = llama_dumps
    result = tinykit.diff_dumps(a, a)
    assert result.equal and result.root is None
    assert result.text().startswith("no divergence")
    assert {r.status for r in result.rows} == {"match"}


def test_an_extra_module_call_is_reported_and_the_root_still_named(llama_dumps, tmp_path):
    model, _, a, _ = llama_dumps
    layer0 = model.model.layers[0]
    # an extra call of layer 0's MLP in the middle of the run; its result is discarded
    handle = layer0.register_forward_hook(lambda m, args, out: [m.mlp(args[0]), None][1])
    try:
        with perturbed(model):
            _record(model, tmp_path / "c")
    finally:
        handle.remove()
    result = tinykit.diff_dumps(a, tmp_path / "c")
    assert any(x.startswith("model.layers.0.mlp (forward call 1") for x in result.only_in_b)
    assert not result.only_in_a
    assert result.root.module == "model.layers.1.mlp.down_proj"
    assert "only in b: " in result.text()


def test_a_dump_written_in_another_process_diffs_here(llama_dumps, tmp_path):
    model, path, a, b = llama_dumps
    code = textwrap.dedent(
        f"""
        import torch, transformers, tinykit
        torch.set_num_threads(1)
        model = transformers.AutoModelForCausalLM.from_pretrained({str(path)!r})
        ids = torch.arange(16).reshape(2, 8) % 50 + 3
        with tinykit.record(model, tensors="full", out={str(tmp_path / "other")!r}):
            model(input_ids=ids, labels=ids).loss.backward()
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300)
    assert tinykit.diff_dumps(a, tmp_path / "other").equal  # the unperturbed weights
    assert tinykit.diff_dumps(b, tmp_path / "other").root.module == "model.layers.1.mlp.down_proj"


def test_cli_diff_prints_the_root_exits_1_and_writes_json_and_html(llama_dumps, tmp_path, capsys):
    _, _, a, b = llama_dumps
    assert main(["dumps", "diff", str(a), str(a)]) == 0
    assert capsys.readouterr().out.startswith("no divergence")
    html, png = tmp_path / "r.html", tmp_path / "r.png"
    argv = ["dumps", "diff", str(a), str(b), "--json", "--html", str(html), "--plot", str(png)]
    assert main(argv) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["root"]["module"] == "model.layers.1.mlp.down_proj"
    page = html.read_text()
    assert page.startswith("<!doctype html>") and "model.layers.1.mlp.down_proj" in page
    assert page.count("<tr") == len(data["rows"]) + 1  # a header, then one row per record
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread

    pixels = imread(png)  # decodes: a real PNG, with bars drawn in more than a few colours
    assert pixels.shape[0] >= 300 and pixels.shape[1] >= 600
    assert len({tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::7].tolist()}) > 10
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".r.")]  # temp names renamed
    # a loose tolerance hides the 1e-3 perturbation
    assert main(["dumps", "diff", str(a), str(b), "--atol", "1", "--rtol", "1"]) == 0


def test_bad_input_gives_one_line_and_a_non_zero_exit(llama_dumps, tiny_model, tmp_path, capsys):
    _, _, a, _ = llama_dumps
    moe, _ = tiny_model("tiny-qwen3-moe")
    with tinykit.record(moe, out=tmp_path / "moe"):
        moe(input_ids=IDS)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{}")
    truncated = tmp_path / "truncated"
    subprocess.run(["cp", "-r", str(a), str(truncated)], check=True)
    shard = next((truncated / "shards").iterdir())
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    cases = {
        str(tmp_path): "is not a tinykit dump: it has no manifest.json",
        str(broken): "manifest.json does not say format 'tinykit-dump'",
        str(tmp_path / "moe"): "are dumps of different models",
        str(truncated): "is truncated or missing",
    }
    capsys.readouterr()  # stage lines of a fixture build, if there was one
    for other, expected in cases.items():
        assert main(["dumps", "diff", str(a), other]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("tinykit: error: UsageError: "), err
        assert expected in err
    with pytest.raises(SystemExit) as exit_info:
        main(["dumps", "diff", str(a), str(a), "--atol", "-1"])
    assert exit_info.value.code == 2 and "'-1' must be >= 0" in capsys.readouterr().err
    with pytest.raises(UsageError, match="exists and is not empty"):
        tinykit.record(moe, out=a)


def test_record_stats_max_bytes_ring_buffer_and_modules_glob(tiny_model, tmp_path):
    model, _ = tiny_model("tiny-llama")
    with tinykit.record(model, modules="model.layers.*.mlp", what=("output",), frames=2) as rec:
        for _ in range(3):
            model(input_ids=IDS)
    assert [r.module for r in rec.records] == ["model.layers.0.mlp", "model.layers.1.mlp"]
    assert rec.records[-1].step == 2 and rec.records[-1].call == 2
    out = rec.records[-1].outputs[0]
    assert out.nan == 0 and out.zeros == 0 and out.min < 0 < out.max
    assert out.hash == ""  # in memory, bytes are hashed only on request
    with tinykit.record(model, modules="lm_head", what=("output",), hashes=True) as hashed:
        model(input_ids=IDS)
    assert len(hashed.records[0].outputs[0].hash) == 32
    with tinykit.record(model, out=tmp_path / "small", max_bytes=3000):
        model(input_ids=IDS)
    manifest = json.loads((tmp_path / "small" / "manifest.json").read_text())
    assert manifest["truncated"] and manifest["dropped_records"] > 0
    assert manifest["bytes"] <= 3000 and not manifest["shards"]  # stats only: no tensors


def test_checkpoint_recomputation_is_marked_not_counted_twice():
    from torch.utils.checkpoint import checkpoint

    inner = torch.nn.Linear(2, 2)
    outer = torch.nn.ModuleDict({"inner": inner})
    x = torch.ones(1, 2, requires_grad=True)
    with tinykit.record(outer) as rec:
        checkpoint(inner, x, use_reentrant=False).sum().backward()
    kinds = [(r.module, r.kind, r.call) for r in rec.records if r.kind != "grad"]
    assert kinds == [("inner", "forward", 0), ("inner", "recompute", 0)]


def test_describe_one_line_per_tensor_and_the_print_context_managers():
    out = {"logits": torch.tensor([[1.0, float("nan")], [0.0, float("inf")]]), "n": 3}
    lines = tinykit.describe(out).splitlines()
    assert lines[0].startswith("logits: tensor[2, 2] float32 cpu n=4 16B x∈[0, 1]")
    assert "NaN!(1)" in lines[0] and "+Inf!(1)" in lines[0] and "zeros=1" in lines[0]
    assert lines[1] == "n: int (not a tensor)"
    state = tinykit.describe(torch.nn.Linear(2, 3))
    assert state.splitlines()[0].startswith("weight: tensor[3, 2]") and "bias: " in state
    original = torch.Tensor.__repr__
    with tinykit.one_line_repr():
        assert repr(torch.zeros(3)).endswith("all zeros")
    assert torch.Tensor.__repr__ is original
    big = torch.arange(5000.0) / 3
    assert "..." in str(big)
    with tinykit.full_precision():
        text = str(big)
    assert "..." not in text and "3.3333334327e-01" in text and "..." in str(big)


def test_the_pytest_marker_and_fixtures(pytester):
    pytester.makepyfile(
        """
        import pytest, torch

        @pytest.mark.tinykit_nan_guard
        def test_marker_fails_on_nan():
            torch.nn.Linear(2, 2)(torch.tensor([[float("nan"), 0.0]]))

        def test_fixture_guard_passes_clean(tinykit_nan_guard):
            model = torch.nn.Linear(2, 2)
            det = tinykit_nan_guard(model)
            model(torch.ones(1, 2)).sum().backward()
            assert det.step == 0

        def test_fixture_record(tinykit_record):
            model = torch.nn.Sequential(torch.nn.Linear(2, 2))
            rec = tinykit_record(model, tensors="full")
            model(torch.ones(1, 2))
            rec.close()
            assert (rec.result / "manifest.json").exists()
        """
    )
    result = pytester.runpytest_inprocess("-p", "tinykit", "-q")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.re_match_lines([r".*NumericsError: NaN \(1 of 2\) in input\[0\] of 'Linear'"])
    result.stdout.fnmatch_lines(["*tinykit numerics*"])


def test_records_old_positional_options_still_work_and_warn(tiny_model):
    model, _ = tiny_model("tiny-llama")
    new_form = r"Write record\(model, modules=\.\.\., what=\.\.\.\)"
    with (
        pytest.warns(DeprecationWarning, match=new_form),
        tinykit.record(model, "lm_head", ("output",)) as old,
    ):
        model(input_ids=IDS)
    with tinykit.record(model, modules="lm_head", what=("output",)) as new:
        model(input_ids=IDS)
    assert [(r.module, r.kind) for r in old.records] == [("lm_head", "forward")]
    assert [r.outputs for r in old.records] == [r.outputs for r in new.records]
