"""The fault table's inputs: good ones built once per module, and broken copies of them."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from _git import commit_all, new_repo
from conftest import HUB_FILES

from fault_table.broken import (
    FNS,
    bad_dtype,
    bad_offsets,
    edit_index,
    edit_manifest,
    header_a_list,
    sharded,
    write_remote_code,
)
from tinykit.cli import main

BERT = HUB_FILES / "google-bert" / "bert-base-uncased"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("fault-inputs")
    for name in ("empty", "empty-out", "toml-bad", "tok-bad", "cfg-bad", "cfg-list", "cfg-unknown"):
        (base / name).mkdir()
    (base / "full-out").mkdir()
    (base / "full-out" / "keep.txt").write_text("keep")
    (base / "empty-out" / ".keep").write_text("")
    (base / "toml-bad" / "x.toml").write_text("oops = [")
    (base / "tok-bad" / "tokenizer.json").write_text("{oops")
    (base / "cfg-bad" / "config.json").write_text("{oops")
    (base / "cfg-list" / "config.json").write_text("[]")
    (base / "cfg-unknown" / "config.json").write_text('{"model_type": "no_such_model"}')
    (base / "a-file").write_text("a file, not a folder")
    (base / "bad.json").write_text("{oops")
    (base / "bad.toml").write_text("oops = [")
    (base / "list.json").write_text('[{"text": {"dtype": "string", "_type": "Value"}}]')
    (base / "empty.json").write_text("{}")
    (base / "feat-bad.json").write_text('{"q": {"_type": "NoSuchFeature"}}')
    (base / "feat.json").write_text('{"text": {"dtype": "string", "_type": "Value"}}')
    (base / "empty.jsonl").write_text("")
    (base / "bad.jsonl").write_text("{oops\n{more oops\n")
    (base / "bad.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    (base / "rows.jsonl").write_text(
        "".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(8))
    )
    (base / "fns.py").write_text(FNS)
    (base / "standins-typo.toml").write_text('[models."o/n"]\nsource = "llama"\nhiden = 8\n')
    (base / "standins-id.toml").write_text('[models."o/n/x"]\nsource = "llama"\n')
    (base / "standins-src.toml").write_text('[models."o/n"]\nsource = "no_such_model_type"\n')
    write_remote_code(base / "remote-code", ran=base / "remote-code-ran")
    shutil.copytree(base / "remote-code", base / "remote-code-no-py")
    (base / "remote-code-no-py" / "modeling_tinyrc.py").unlink()
    (base / "empty.jinja").write_text("  \n")
    (base / "arch-str.toml").write_text(
        'model_types = ["bert"]\n[set]\narchitectures = "BertModel"\n'
    )
    (base / "faithful-bad").mkdir()
    shutil.copyfile(BERT / "config.json", base / "faithful-bad" / "config.json")
    (base / "faithful-bad" / "tokenizer.json").write_text("{oops")
    # outputs kept by hand: refused without --force
    for name in ("kept.json", "kept.toml", "kept.png", "kept.html"):
        (base / name).write_text("kept by hand")
    # the manifest's own folder as -o --force (it must survive), and one with stray files
    for name in ("hubwith", "hubstray"):
        (base / name).mkdir()
        (base / name / "standins.toml").write_text('[models."o/n"]\nsource = "llama"\n')
    (base / "hubstray" / "notes.txt").write_text("mine")
    (base / "standins-ds.toml").write_text('[models."datasets/x"]\nsource = "llama"\n')
    (base / "standins-ok.toml").write_text('[models."o/n"]\nsource = "llama"\n')
    # fixture folders: a cheap spec; lock.json shaped wrong; a spec that is not a table
    specs = '[d]\nkind = "synthetic_dataset"\nsource = {t = {dtype = "string", _type = "Value"}}\n'
    for name, lock in (
        ("fx-ok", None),
        ("fx-lock-list", "[]"),
        ("fx-lock-files", '{"fixtures": {"d": {"files": {"a": 3}}}}'),
        ("fx-lock-bad", "{oops"),
    ):
        (base / name).mkdir()
        (base / name / "f.toml").write_text(specs)
        if lock is not None:
            (base / name / "lock.json").write_text(lock)
    (base / "fx-spec").mkdir()
    (base / "fx-spec" / "f.toml").write_text('[d]\nkind = "model"\nsource = "llama"\nspec = 3\n')
    return base


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """One real tiny model, and broken copies of it."""
    base = tmp_path_factory.mktemp("fault-model")
    assert main(["make-tiny", "llama", "-o", str(base / "good")]) == 0
    for name in ("no-weights", "truncated", "garbage", "mismatched", "arch-typo", "remote-code"):
        shutil.copytree(base / "good", base / name)
    (base / "no-weights" / "model.safetensors").unlink()
    weights = (base / "good" / "model.safetensors").read_bytes()
    (base / "truncated" / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    (base / "garbage" / "model.safetensors").write_bytes(b"\x00" * 4096)
    config = json.loads((base / "mismatched" / "config.json").read_text())
    config["hidden_size"] *= 2
    (base / "mismatched" / "config.json").write_text(json.dumps(config))
    config = json.loads((base / "arch-typo" / "config.json").read_text())
    config["architectures"] = ["LlamaForCausalLm"]
    (base / "arch-typo" / "config.json").write_text(json.dumps(config))
    # its own code, as make-tiny --trust-remote-code writes it; the code would leave a file
    write_remote_code(base / "code", ran=base / "remote-code-ran")
    config = json.loads((base / "remote-code" / "config.json").read_text())
    config |= {
        "model_type": "tinyrc",
        "auto_map": json.loads((base / "code" / "config.json").read_text())["auto_map"],
    }
    (base / "remote-code" / "config.json").write_text(json.dumps(config))
    for name in ("configuration_tinyrc.py", "modeling_tinyrc.py"):
        shutil.copyfile(base / "code" / name, base / "remote-code" / name)
    # slice sources: a tensor's offsets or dtype wrong, a header that is a list, shard indexes
    for name, damage in (
        ("slice-offsets", bad_offsets),
        ("slice-dtype", bad_dtype),
        ("slice-header-list", header_a_list),
    ):
        shutil.copytree(base / "good", base / name)
        damage(base / name / "model.safetensors")
    for name, index in (
        ("slice-index-bad", "{oops"),
        ("slice-index-list", '{"weight_map": ["model-00001-of-00002.safetensors"]}'),
        ("slice-index-absent", '{"weight_map": {"x": "model-00009-of-00009.safetensors"}}'),
    ):
        shutil.copytree(base / "good", base / name)
        sharded(base / name, index)
    shutil.copytree(base / "good", base / "slice-config-bad")
    (base / "slice-config-bad" / "config.json").write_text("{oops")
    (base / "pickle-only").mkdir()
    shutil.copyfile(base / "good" / "config.json", base / "pickle-only" / "config.json")
    (base / "pickle-only" / "pytorch_model.bin").write_bytes(b"not unpickled")
    return base


FIXTURE_SPECS = """
[tiny-m]
kind = "model"
source = "llama"
spec = { seed = 0 }

[tiny-d]
kind = "synthetic_dataset"
source = { text = { dtype = "string", _type = "Value" } }
spec = { rows = 4, seed = 0 }
"""


@pytest.fixture(scope="module")
def built_fixtures(tmp_path_factory) -> Path:
    """A repo's fixtures folder, locked, and the cache it was built into: ``fx/`` and ``cache/``."""
    base = tmp_path_factory.mktemp("fault-fixtures")
    (base / "fx").mkdir()
    (base / "fx" / "fixtures.toml").write_text(FIXTURE_SPECS)
    assert (
        main(
            [
                "fixtures",
                "lock",
                "--fixtures-dir",
                str(base / "fx"),
                "--cache-dir",
                str(base / "cache"),
            ]
        )
        == 0
    )
    return base


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    """A recording of a tiny torch model (tensors="full"), and broken copies of it."""
    import torch

    import tinykit

    base = tmp_path_factory.mktemp("fault-dumps")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    with tinykit.record(net, tensors="full", out=base / "good"):
        net(torch.ones(1, 4))
    damage = {
        "step-a-string": lambda d: edit_index(d, lambda rs: rs[0].update(step="x")),
        "record-a-list": lambda d: edit_index(d, lambda rs: rs.__setitem__(0, [])),
        "tensor-no-shape": lambda d: edit_index(d, lambda rs: rs[0]["outputs"][0].pop("shape")),
        "model-a-list": lambda d: edit_manifest(d, lambda m: m.update(model=[])),
        "shard-outside": lambda d: edit_manifest(d, lambda m: m.update(shards={"../x": 1})),
        "shard-garbage": lambda d: [
            p.write_bytes(b"\0" * p.stat().st_size) for p in (d / "shards").glob("*")
        ],
    }
    for name, edit in damage.items():
        shutil.copytree(base / "good", base / name)
        edit(base / name)
    return base


@pytest.fixture(scope="module")
def git_repo(tmp_path_factory) -> Path:
    """A clone of three commits (tags v0.0, v0.1, v0.2) for bisect commits."""
    repo = new_repo(tmp_path_factory.mktemp("fault-repo"))
    for i in range(3):
        (repo / "value.txt").write_text(str(i))
        commit_all(repo, f"commit {i}", tag=f"v0.{i}")
    return repo


def _mount(path: Path, *options: str) -> str | None:
    path.mkdir(exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(["size=256k", *options]), "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    return None if done.returncode == 0 else (done.stderr.strip() or "mount failed")


@pytest.fixture(scope="module")
def mounts(tmp_path_factory):
    """{'full': a tmpfs with no space left, 'ro': a read-only tmpfs}; a reason where denied."""
    base = tmp_path_factory.mktemp("fault-mounts")
    found: dict[str, Path | str] = {}
    for name, options in (("full", ()), ("ro", ("ro",))):
        reason = _mount(base / name, *options)
        found[name] = base / name if reason is None else reason
    if isinstance(found["full"], Path):
        filler = open(found["full"] / "filler", "wb", buffering=0)  # noqa: SIM115
        with filler, contextlib.suppress(OSError):  # until the disk is full
            while True:
                filler.write(b"\0" * 4096)
    yield found
    for name in ("full", "ro"):
        if isinstance(found[name], Path):
            subprocess.run(["umount", str(found[name])], check=False)
