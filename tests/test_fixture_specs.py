"""Named fixtures and lock.json: reproducible builds, precise drift reports, bad spec files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import hypothesis
import pytest

from tests._hub_files import load_warnings
from tests.conftest import REPO
from tinykit.artifacts import named as fixture_specs
from tinykit.artifacts.cache import Cache
from tinykit.cli import main
from tinykit.errors import FixtureDrift, UsageError

TEXT = """
[tiny-text]
kind = "synthetic_dataset"
source = { text = { dtype = "string", _type = "Value" } }
spec = { rows = 4, seed = 0 }
"""
LABELS = """
[tiny-labels]
kind = "synthetic_dataset"
source = { label = { _type = "ClassLabel", names = ["a", "b"] } }
spec = { rows = 4, seed = 1 }
"""


@pytest.fixture
def specs(tmp_path):
    folder = tmp_path / "fixtures"
    folder.mkdir()
    (folder / "text.toml").write_text(TEXT)
    (folder / "labels.toml").write_text(LABELS)
    return folder


def test_shipped_fixtures_verify_from_a_fresh_checkout(tmp_path):
    """The acceptance check: a copy of the repo with an empty cache rebuilds the locked bytes."""
    checkout = tmp_path / "checkout"
    for part in ("tinykit", "fixtures", "recipes"):
        shutil.copytree(REPO / part, checkout / part, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(checkout), "TINYKIT_CACHE": str(tmp_path / "empty")}
    out = subprocess.run(
        [sys.executable, "-m", "tinykit", "fixtures", "verify", "--json"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["drift"] == [] and report["version_changes"] == {}
    assert sorted(report["checked"]) == sorted(fixture_specs.load_specs(REPO / "fixtures"))
    # every model fixture within its size budget (the same code and sources: cache hits)
    built = fixture_specs.build(folder=REPO / "fixtures", cache=Cache(tmp_path / "empty"))
    kinds = {n: s.kind for n, s in fixture_specs.load_specs(REPO / "fixtures").items()}
    sizes = {n: _weights_and_budget(p) for n, p in built.items() if kinds[n] == "model"}
    assert len(sizes) >= 7 and all(0 < w <= b for w, b in sizes.values()), sizes


def _weights_and_budget(folder):
    """(bytes of the weight files as written, persistent buffers included; the budget of a tiny
    model of its kind, from the config alone)."""
    import torch
    import transformers

    from tinykit.model.load import architecture_class
    from tinykit.model.size import budget, saved_bytes

    config = transformers.AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = architecture_class(config, folder)._from_config(config)
    return saved_bytes(folder), budget(model)


def test_lock_then_verify_passes_a_corrupt_cache_entry_is_rebuilt_and_drift_is_reported(
    specs, tmp_path
):
    cache = Cache(tmp_path / "cache")
    fixture_specs.lock(folder=specs, cache=cache)
    assert fixture_specs.verify(folder=specs, cache=cache, fresh=True)["drift"] == []
    built = fixture_specs.build(["tiny-text"], specs, cache)["tiny-text"]
    parquet = built / "data" / "train-00000-of-00001.parquet"
    good = parquet.read_bytes()
    # a cached file altered on disk is a corrupt entry: rebuilt, never reported (nor locked)
    parquet.write_bytes(good + b"\0")
    assert fixture_specs.verify(folder=specs, cache=cache)["drift"] == []
    assert parquet.read_bytes() == good
    # a built file that differs from the lock is drift: the lock records other bytes
    lock = json.loads((specs / "lock.json").read_text())
    real = lock["fixtures"]["tiny-text"]["files"]["data/train-00000-of-00001.parquet"]
    old = "0" * 64
    lock["fixtures"]["tiny-text"]["files"]["data/train-00000-of-00001.parquet"] = old
    (specs / "lock.json").write_text(json.dumps(lock))
    with pytest.raises(FixtureDrift) as e:
        fixture_specs.verify(folder=specs, cache=cache)
    assert str(e.value).startswith(
        f"1 fixture(s) differ from lock.json: tiny-text: data/train-00000-of-00001.parquet changed "
        f"(lock {old[:12]}, built {real[:12]})"
    )
    assert str(e.value).endswith(
        "Versions changed since the lock: none. If the change is intended, run: "
        "tinykit fixtures lock tiny-text"
    )
    [drift] = e.value.report["drift"]
    assert drift["locked"] == old and drift["built"] == real and drift["problem"] == "changed"


def test_spec_edits_missing_fixtures_and_version_changes_are_reported(specs, tmp_path):
    cache = Cache(tmp_path / "cache")
    fixture_specs.lock(folder=specs, cache=cache)
    lock = json.loads((specs / "lock.json").read_text())
    # each fixture locks the versions that key its kind: hypothesis draws synthetic rows
    assert lock["fixtures"]["tiny-text"]["versions"]["hypothesis"] == hypothesis.__version__
    assert "torch" not in lock["fixtures"]["tiny-text"]["versions"]
    lock["fixtures"]["tiny-text"]["versions"]["hypothesis"] = "0.0.1"
    (specs / "lock.json").write_text(json.dumps(lock))
    assert fixture_specs.verify(folder=specs, cache=cache)["version_changes"] == {
        "hypothesis": ["0.0.1", hypothesis.__version__]
    }
    (specs / "text.toml").write_text(TEXT.replace("rows = 4", "rows = 5"))
    (specs / "more.toml").write_text(LABELS.replace("tiny-labels", "tiny-new"))
    with pytest.raises(FixtureDrift) as e:
        fixture_specs.verify(folder=specs, cache=cache)
    problems = {(d["fixture"], d["problem"]) for d in e.value.report["drift"]}
    assert {
        ("tiny-text", "spec changed"),
        ("tiny-new", "not in lock.json"),
        ("tiny-text", "changed"),
    } <= problems
    assert f"Versions changed since the lock: hypothesis 0.0.1 -> {hypothesis.__version__}." in str(
        e.value
    )


def test_locking_one_fixture_keeps_the_others(specs, tmp_path):
    cache = Cache(tmp_path / "cache")
    fixture_specs.lock(folder=specs, cache=cache)
    before = json.loads((specs / "lock.json").read_text())
    (specs / "text.toml").write_text(TEXT.replace("seed = 0", "seed = 3"))
    fixture_specs.lock(["tiny-text"], folder=specs, cache=cache)
    after = json.loads((specs / "lock.json").read_text())
    assert after["fixtures"]["tiny-labels"] == before["fixtures"]["tiny-labels"]
    assert after["fixtures"]["tiny-text"]["spec"]["seed"] == 3
    assert fixture_specs.verify(folder=specs, cache=cache)["drift"] == []


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[a\nkind=", "is not valid TOML"),
        ('[x]\nkind = "wheel"\nsource = "y"\n', r"has kind 'wheel'; expected one of \["),
        (
            '[x]\nsource = "y"\nlayers = 2\n',
            r"must be a table with keys kind, source and optionally",
        ),
        (TEXT.replace("tiny-text", "tiny-labels"), r"is also defined in .*labels.toml. Rename one"),
    ],
)
def test_bad_spec_files_are_usage_errors(specs, text, match):
    (specs / "zz.toml").write_text(text)
    with pytest.raises(UsageError, match=match):
        fixture_specs.load_specs(specs)


def test_cli_verify_exit_codes(specs, tmp_path, capsys):
    args = ["--fixtures-dir", str(specs), "--cache-dir", str(tmp_path / "cache")]
    assert main(["fixtures", "verify", *args]) == 2  # no lock yet: a usage error
    assert "No lockfile at" in capsys.readouterr().err
    assert main(["fixtures", "lock", *args]) == 0
    assert main(["fixtures", "verify", *args]) == 0
    assert capsys.readouterr().out.endswith("2 fixture(s) match lock.json\n")
    (specs / "text.toml").write_text(TEXT.replace("rows = 4", "rows = 6"))
    assert main(["fixtures", "verify", "tiny-text", *args]) == 1
    err = capsys.readouterr().err
    assert "FixtureDrift: 1 fixture(s) differ from lock.json: tiny-text: spec changed" in err


def test_loading_a_shipped_model_fixture_logs_no_transformers_warning(tmp_path):
    specs = fixture_specs.load_specs(REPO / "fixtures")
    models = [name for name, spec in specs.items() if spec.kind == "model"]
    built = fixture_specs.build(models, REPO / "fixtures", Cache(tmp_path))
    assert load_warnings(built.values()) == ""
