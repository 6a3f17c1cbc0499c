"""`dumps diff` names the root cause where real training bugs live: the data, the optimizer, a
model the test cannot reach, a resumed run.

Each case trains the tiny-llama fixture for a few real SGD steps twice, once with the bug: labels
shifted by a collator that the model shifts again (the most common fine-tuning bug), another
learning rate, a model built inside a function (recorded without the object, in this process and
by `tinykit record -- python script.py`), and a run resumed at step 2 (lined up by `first_step`
or `--align-steps`).
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import transformers

import tinykit
from tinykit.cli import main
from tinykit.errors import UsageError
from tinykit.numerics.dumps import read_dump

pytest_plugins = ["pytester"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One thread for the whole module, `reference` included (recorded before any test's own
    run), as in the scripts' processes: a bitwise comparison must not hang on the core count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # bitwise-stable reductions, and no spinning threads on a busy box
    yield
    torch.set_num_threads(threads)


def batch(step: int, shift: bool = False) -> dict[str, torch.Tensor]:
    """A batch per step; `shift`: a collator that shifts the labels (the model shifts again)."""
    ids = (torch.arange(16).reshape(2, 8) * (step + 1)) % 50 + 3
    labels = torch.cat([ids[:, 1:], torch.full((2, 1), -100)], 1) if shift else ids.clone()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def train(path, steps: range, *, lr: float = 1e-2, shift: bool = False, state=None) -> dict:
    """SGD steps of a model built here (the caller has no handle on it); its final weights."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    if state is not None:
        model.load_state_dict(state)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in steps:
        model(**batch(step, shift)).loss.backward()
        opt.step()
        opt.zero_grad()
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def llama():
    return tinykit.fixture_path("tiny-llama")


@pytest.fixture(scope="module")
def reference(llama, tmp_path_factory, _one_thread):
    out = tmp_path_factory.mktemp("reference") / "dump"
    with tinykit.record(out=out):  # no model object: train() builds its own
        train(llama, range(4))
    return out


def test_labels_shifted_in_one_run_are_the_root_cause_at_step_0(llama, reference, tmp_path):
    with tinykit.record(out=tmp_path / "shifted"):
        train(llama, range(4), shift=True)
    result = tinykit.diff_dumps(reference, tmp_path / "shifted")
    root = result.root
    assert (root.kind, root.tensor, root.step, root.module) == (
        "input",
        "labels",
        0,
        "LlamaForCausalLM",
    )
    assert (root.mismatched, root.total) == (16, 16)
    assert result.text().startswith(
        "first divergence: input 'labels' of the top-level call at step 0 differs (16 of 16 "
        "elements): the data fed to the model changed"
    )
    assert result.loss.startswith("the loss first differs at step 0")
    status = {(r.module, r.kind, r.step): r.status for r in result.rows}
    # the forward pass of step 0 does not read the labels: it matches; its loss and backward not
    assert status["model.layers.1.mlp.down_proj", "forward", 0] == "match"
    assert status["LlamaForCausalLM", "loss", 0] == "downstream"
    assert status["model.embed_tokens", "forward", 1] == "downstream"
    assert "root" not in {r.status for r in result.rows if r.kind == "forward"}


def test_another_learning_rate_is_a_parameter_differing_at_step_1(llama, reference, tmp_path):
    with tinykit.record(out=tmp_path / "lr"):
        train(llama, range(4), lr=2e-2)
    result = tinykit.diff_dumps(reference, tmp_path / "lr")
    root = result.root
    assert (root.kind, root.tensor, root.step) == ("params", "model.embed_tokens.weight", 1)
    assert root.tensors_differing == root.tensors == 21  # every weight, after one update
    assert result.text().startswith(
        "first divergence: parameter 'model.embed_tokens.weight' differs at the start of step 1"
    )
    assert "the update before this step differed (learning rate" in result.text()
    assert all(r.status == "match" for r in result.rows if r.step == 0)
    # a module is never blamed for weights that changed before it ran
    assert not [r for r in result.rows if r.status in ("root", "differs") and r is not root]


def test_a_model_built_inside_a_function_is_recorded_like_the_object(llama, reference, tmp_path):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_pretrained(llama)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with tinykit.record(model, out=tmp_path / "object"):
        for step in range(4):
            model(**batch(step)).loss.backward()
            opt.step()
            opt.zero_grad()
    result = tinykit.diff_dumps(reference, tmp_path / "object")
    assert result.equal, result.text()
    kinds = {(r.kind, r.step) for r in result.rows}
    assert {("input", 3), ("params", 3), ("loss", 3)} <= kinds  # one step per top-level call
    manifest = json.loads((reference / "manifest.json").read_text())
    assert manifest["model"]["class"] == "LlamaForCausalLM"
    assert manifest["options"]["first_step"] == 0


def test_a_module_called_before_the_model_neither_names_nor_steps_it():
    """A transform module without parameters called first is a root, but not the model."""
    scale, model = torch.nn.Identity(), torch.nn.Sequential(torch.nn.Linear(2, 2))
    with tinykit.record() as rec:
        for _ in range(3):
            model(scale(torch.ones(1, 2)))
    names = {r.module for r in rec.records}
    assert {"Identity#1", "0", "Sequential"} <= names
    assert rec.records[-1].step == 2 and rec.main_root is model


SCRIPT = textwrap.dedent(
    """
    import sys, torch, transformers
    torch.set_num_threads(1)
    sys.path.insert(0, sys.argv[2])
    from test_numerics_rootcause import train
    train(sys.argv[1], range(4))
    """
)


def test_tinykit_record_records_a_script_without_touching_it(llama, reference, tmp_path, capfd):
    """`tinykit record -- CMD`: the script's process (and each one it starts) is recorded."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    tests = str(Path(__file__).parent)  # where `train` is imported from
    one = f"{sys.executable} {script} {llama} {tests}"
    assert main(["record", "-o", str(tmp_path / "run"), "--", one]) == 0
    assert "dumps: " + str(tmp_path / "run") in capfd.readouterr().err
    assert tinykit.diff_dumps(reference, tmp_path / "run").equal
    # two processes that run the model, and one that does not: two dumps, in start order
    two = f"{one} && {sys.executable} -c 'import torch' && {one}"
    assert main(["record", "-o", str(tmp_path / "two"), "--", two]) == 0
    folders = sorted(p.name for p in (tmp_path / "two").iterdir())
    assert folders == ["process-0", "process-1"]
    argv = json.loads((tmp_path / "two" / "process-1" / "manifest.json").read_text())
    assert argv["process"]["argv"][0] == str(script)
    assert tinykit.diff_dumps(reference, tmp_path / "two" / "process-1").equal
    # a command that runs no model: one line, exit 2, nothing left behind
    assert main(["record", "-o", str(tmp_path / "none"), "--", sys.executable, "-c", "1"]) == 2
    assert "nothing was recorded" in capfd.readouterr().err
    assert not (tmp_path / "none").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_tinykit_record_timeout_stops_a_hung_command_and_keeps_its_dump(llama, tmp_path, capfd):
    """A command that hangs after its steps is stopped at --timeout (exit 124, as timeout(1));
    its process gets SIGINT, so the steps it recorded are still written."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.replace("train(sys.argv[1], range(4))", HANG))
    tests = str(Path(__file__).parent)
    cmd = f"{sys.executable} {script} {llama} {tests}"
    assert main(["record", "-o", str(tmp_path / "run"), "--timeout", "20", "--", cmd]) == 124
    assert "record: timed out; dumps: " + str(tmp_path / "run") in capfd.readouterr().err
    steps = {r["step"] for r in read_dump(tmp_path / "run").records}
    assert steps == {0, 1}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


HANG = "train(sys.argv[1], range(2)); print('trained', flush=True); __import__('time').sleep(600)"


def test_a_resumed_run_lines_up_by_first_step_or_align_steps(llama, reference, tmp_path, capsys):
    state = train(llama, range(2))  # steps 0 and 1, then "a checkpoint"
    with tinykit.record(out=tmp_path / "resumed", first_step=2):
        train(llama, range(2, 4), state=state)
    result = tinykit.diff_dumps(reference, tmp_path / "resumed")
    assert result.equal and result.steps_left_out == ["a: steps 0-1"]
    assert {r.step for r in result.rows} == {2, 3}
    with tinykit.record(out=tmp_path / "numbered-0"):  # the same run, its steps numbered 0, 1
        train(llama, range(2, 4), state=state)
    assert not tinykit.diff_dumps(reference, tmp_path / "numbered-0").equal
    aligned = tinykit.diff_dumps(reference, tmp_path / "numbered-0", align_steps=(2, 0))
    assert aligned.equal and aligned.rows[0].label().endswith("step 2 (b's step 0))")
    assert (
        main(
            ["dumps", "diff", str(reference), str(tmp_path / "numbered-0"), "--align-steps", "2:0"]
        )
        == 0
    )
    assert main(["dumps", "diff", str(reference), str(tmp_path / "resumed")]) == 0
    capsys.readouterr()
    with pytest.raises(UsageError, match="share no step"):
        tinykit.diff_dumps(reference, tmp_path / "numbered-0", align_steps=(9, 0))
    with pytest.raises(SystemExit):
        main(["dumps", "diff", str(reference), str(reference), "--align-steps", "2-0"])
    assert "is not A:B" in capsys.readouterr().err
    with pytest.raises(UsageError, match="first_step=-1"):
        tinykit.record(first_step=-1)


def test_the_record_marker_needs_no_fixture_and_no_model(pytester, llama, tmp_path):
    pytester.makepyfile(
        f"""
        import pytest, torch, transformers

        def train():
            model = transformers.AutoModelForCausalLM.from_pretrained({str(llama)!r})
            ids = torch.arange(16).reshape(2, 8) % 50 + 3
            model(input_ids=ids, labels=ids).loss.backward()

        @pytest.mark.tinykit_record(out={str(tmp_path / "dumps")!r} + "/{{name}}")
        def test_recorded():
            train()

        @pytest.mark.tinykit_record
        @pytest.mark.tinykit_nan_guard
        def test_both_markers():
            train()
        """
    )
    (tmp_path / "dumps").mkdir()
    result = pytester.runpytest_inprocess("-p", "tinykit", "-q", "-rA")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*dump: {tmp_path / 'dumps' / 'test_recorded'}*"])
    manifest = json.loads((tmp_path / "dumps" / "test_recorded" / "manifest.json").read_text())
    assert manifest["model"]["class"] == "LlamaForCausalLM" and manifest["records"] > 50


def test_detect_anomalies_without_the_model_names_the_module():
    def build_and_run():
        model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
        with torch.no_grad():
            model[1].weight.fill_(float("inf"))
        model(torch.ones(1, 2)).sum().backward()

    with pytest.raises(tinykit.NumericsError) as info, tinykit.detect_anomalies():
        build_and_run()
    report = info.value.report
    assert (report["module"], report["kind"], report["parameter"]) == ("1", "output", "weight")
