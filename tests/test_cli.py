"""The `tinykit` command as a user runs it: a real subprocess, exit codes, one-line errors, --json."""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys

import pytest
from conftest import HUB_FILES

from tinykit.cli import main


def tinykit(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "tinykit", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_make_tiny_embedded_default_then_verify(tmp_path):
    out = tmp_path / "tiny-qwen3-moe"
    made = tinykit("make-tiny", "qwen3_moe", "-o", out, "--json")
    assert made.returncode == 0, made.stderr
    result = json.loads(made.stdout)
    assert result["model_class"] == "Qwen3MoeForCausalLM" and result["path"] == str(out)
    assert result["bytes"] < 1_000_000 and result["params"] > 0
    assert {"config.json", "model.safetensors"} <= set(result["files"])
    stages = [line for line in made.stderr.splitlines() if line.startswith("tinykit: ")]
    assert stages[:3] == [
        "tinykit: resolving qwen3_moe",
        "tinykit: tokenizer (tiny mode)",
        "tinykit: weights: Qwen3MoeForCausalLM (float32, seed 0)",
    ]
    checked = tinykit("verify", out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"tinykit: checks: loading {out} with Qwen3MoeForCausalLM" in checked.stderr
    assert checked.stdout.rstrip().endswith("OK")
    assert "Qwen3MoeSparseMoeBlock" in checked.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["make-tiny", HUB_FILES / "THUDM/chatglm3-6b"], 2, "--trust-remote-code"),
        (["make-tiny", "not-a-model"], 2, "is not a transformers model_type, a folder or a Hub id"),
        (["make-tiny", "llama", "--hidden", "30"], 2, "hidden=30"),
        (["make-tiny", "deepseek_v3", "--layers", "1"], 2, "cannot keep all 2 block types"),
        (["verify", "no-such-dir"], 2, "Model folder no-such-dir does not exist"),
    ],
)
def test_bad_input_gives_one_line_error_nonzero_exit_and_writes_nothing(
    tmp_path, args, code, message
):
    done = (
        tinykit(*args, "-o", tmp_path / "out")
        if args[0] == "make-tiny"
        else tinykit(*args, cwd=tmp_path)
    )
    assert done.returncode == code
    assert message in done.stderr
    # stage lines may come first; the error is one line, the last
    lines = done.stderr.strip().splitlines()
    assert [line for line in lines if "error" in line] == lines[-1:], done.stderr
    assert lines[-1].startswith("tinykit: error: ")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    out = tmp_path_factory.mktemp("built") / "tiny"
    made = tinykit("make-tiny", "llama", "-o", out)
    assert made.returncode == 0, made.stderr
    return out


def _vocab_8(folder):
    config = json.loads((folder / "config.json").read_text())
    config["vocab_size"] = 8  # the saved embeddings no longer match the config
    (folder / "config.json").write_text(json.dumps(config))


def _truncate_weights(folder):
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


def _delete_weights(folder):
    (folder / "model.safetensors").unlink()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_vocab_8, "lm_head.weight is (1024, 32) in the weights but (8, 32) by config.json"),
        (_truncate_weights, "the weights (model.safetensors) do not load: SafetensorError: "),
        (
            _delete_weights,
            "the weights (model.safetensors) do not load: OSError: Error no file named model.safetensors",
        ),
    ],
)
def test_verify_fails_with_exit_1_and_one_line_on_a_broken_model(
    tmp_path, tiny_llama, damage, message
):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_llama, broken)
    damage(broken)
    done = tinykit("verify", broken)
    assert done.returncode == 1, done.stderr
    *stages, error = done.stderr.strip().splitlines()  # stage lines, then the one error line
    assert all(s.startswith("tinykit: ") and "error" not in s for s in stages), done.stderr
    assert error.startswith(f"tinykit: error: TinyArtifactInvalid: {broken} failed verification: ")
    assert message in error
    assert "PROBLEM: " in done.stdout and done.stdout.rstrip().endswith("FAILED")


def _crash(*args, **kwargs):
    raise RuntimeError("internal invariant broken\nsecond line of detail")


def test_an_unexpected_exception_is_a_bug_exit_70_in_one_line(monkeypatch, capsys, tmp_path):
    # fault injection: the API raises something outside the TinykitError hierarchy
    monkeypatch.setattr("tinykit.model.verify.verify", _crash)
    monkeypatch.delenv("TINYKIT_DEBUG", raising=False)
    assert main(["verify", str(tmp_path)]) == 70
    assert capsys.readouterr().err == (
        "tinykit: error: this is a tinykit bug, please report it: RuntimeError: internal invariant "
        "broken (rerun with --debug or TINYKIT_DEBUG=1 for the traceback)\n"
    )


def test_a_missing_dependency_is_a_setup_error_exit_3_not_a_bug():
    # a Python where transformers cannot be imported (None in sys.modules blocks the import)
    code = (
        "import sys; sys.modules['transformers'] = None; from tinykit.cli import main; "
        "sys.exit(main(['coverage', 'llama']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith(
        "tinykit: error: SetupError: the module 'transformers' is not installed"
    )
    assert "this is a tinykit bug" not in done.stderr


@pytest.mark.parametrize("how", ["--debug", "--debug last", "TINYKIT_DEBUG=1"])
def test_debug_adds_the_traceback_of_a_bug(monkeypatch, capsys, how, tmp_path):
    monkeypatch.setattr("tinykit.model.verify.verify", _crash)
    monkeypatch.delenv("TINYKIT_DEBUG", raising=False)
    if how == "--debug":
        argv = ["--debug", "verify", str(tmp_path)]
    elif how == "--debug last":  # where a user adds it after reading "rerun with --debug"
        argv = ["verify", str(tmp_path), "--debug"]
    else:
        monkeypatch.setenv("TINYKIT_DEBUG", "1")
        argv = ["verify", str(tmp_path)]
    assert main(argv) == 70
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):"
    assert "RuntimeError: internal invariant broken" in err
    assert err[-1].startswith("tinykit: error: this is a tinykit bug, please report it: ")


def test_ctrl_c_exits_130(monkeypatch, capsys, tmp_path):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("tinykit.model.verify.verify", interrupted)
    assert main(["verify", str(tmp_path)]) == 130


def test_help_documents_the_exit_codes():
    done = tinykit("--help")
    assert done.returncode == 0
    codes = done.stdout.split("exit codes:")[1]
    for code, meaning in [
        ("1", "a check failed"),
        ("2", "usage error"),
        ("3", "setup error"),
        ("70", "a tinykit bug"),
        ("124", "ran past --timeout"),
        ("128+N", "killed by signal N"),
        ("130", "interrupted"),
    ]:
        assert any(line.split()[:1] == [code] and meaning in line for line in codes.splitlines())


def test_help_lists_the_commands():
    done = tinykit("--help")
    assert done.returncode == 0
    for command in ("make-tiny", "verify", "coverage"):
        assert command in done.stdout


def test_coverage_reports_each_type_and_sets_apart_upstream_breakage():
    done = tinykit("coverage", "llama", "qwen3_moe", "dbrx", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = {r["model_type"]: r for r in report["rows"]}
    assert rows["llama"]["ok"] and rows["qwen3_moe"]["ok"]
    # transformers' own DbrxConfig() cannot build a DbrxForCausalLM: not counted against tinykit
    assert (
        not rows["dbrx"]["ok"]
        and rows["dbrx"]["upstream"]
        and report["upstream_broken"] == ["dbrx"]
    )
    assert (report["passed"], report["total"], report["rate_buildable"]) == (2, 3, 1.0)


def test_inprocess_determinism_imports_a_module_of_the_current_folder(tmp_path):
    (tmp_path / "mystep.py").write_text(
        "import torch\n\ndef step():\n    return torch.nn.Linear(3, 2)(torch.rand(4, 3))\n"
    )
    # -P: no working directory on sys.path, as under the installed `tinykit` console script
    done = subprocess.run(
        [sys.executable, "-P", "-m", "tinykit", "check-determinism", "mystep:step"]
        + ["--mode", "inprocess"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("deterministic: 2 runs of mystep:step matched")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["make-tiny", "lama"],
            "*'lama' is not a transformers model_type, * Did you mean 'llama'*",
        ),
        (["make-tiny", "Llama"], "* Did you mean 'llama'?"),
        (["make-tiny", "qwen3-moe"], "* Did you mean 'qwen3_moe'?"),
        (["make-tiny", "./no-such-folder"], "*Folder ./no-such-folder does not exist.*"),
        (["verify", "./no-such-folder"], "*Model folder ./no-such-folder does not exist.*"),
        (
            ["maketiny", "llama"],
            "tinykit: error: unknown command 'maketiny'. Did you mean 'make-tiny'?*",
        ),
        (
            ["make-tiny", "llama", "--hiden", "8"],
            "tinykit make-tiny: error: unrecognized arguments: --hiden 8. Did you mean '--hidden'?*",
        ),
    ],
)
def test_usage_errors_answer_before_heavy_imports_with_a_suggestion(args, message):
    # -X importtime lists every module imported: a fast answer imports neither torch nor transformers
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tinykit", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert fnmatch.fnmatch(lines[-1], message), lines[-1]
    imported = {line.split("|")[-1].strip() for line in lines if line.startswith("import time:")}
    assert not imported & {"torch", "transformers", "datasets"}
    if "--hiden" in args:  # the subcommand's own help, not the top-level one (in one line)
        assert lines[-1].endswith("See: tinykit make-tiny --help"), lines[-1]


def test_faithful_without_tokenizer_files_is_an_error_and_verify_flags_a_missing_one(tmp_path):
    source = tmp_path / "config-only"
    source.mkdir()
    (source / "config.json").write_bytes(
        (HUB_FILES / "meta-llama/Llama-2-7b-hf/config.json").read_bytes()
    )
    faithful = tinykit("make-tiny", source, "--mode", "faithful", "-o", tmp_path / "f")
    assert faithful.returncode == 2
    assert "has no vocabulary file" in faithful.stderr and "--tokenizer SOURCE" in faithful.stderr
    assert not (tmp_path / "f").exists()
    out = tmp_path / "tiny"
    assert tinykit("make-tiny", source, "-o", out).returncode == 0
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (out / name).unlink(missing_ok=True)
    checked = tinykit("verify", out)
    assert checked.returncode == 1
    assert "PROBLEM: no tokenizer beside the model, which reads token ids" in checked.stdout
