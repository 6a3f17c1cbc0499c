"""The fault table: every command, fed what an unlucky user or a hostile input gives it, ends in
its exit code and exactly one stderr line (no traceback), and leaves the disk as it was.

Most rows call the CLI in this process (`tinykit.cli.main`), which is the adapter under test;
rows about signals and concurrent writers run real `tinykit` subprocesses. A full disk and a
read-only file system are small tmpfs mounts (skipped, with the reason, where mount is denied).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import HUB_FILES, REPO

from tinykit._files import file_hashes
from tinykit.cli import main

BERT = HUB_FILES / "google-bert" / "bert-base-uncased"
VIT = HUB_FILES / "google" / "vit-base-patch16-224-in21k"


@dataclass(frozen=True)
class Row:
    argv: tuple[str, ...]  # {in} is the inputs folder, {out} a fresh folder for outputs
    code: int
    says: str  # a piece of the one stderr line
    needs: tuple[str, ...] = field(default=())  # "full" / "ro": a tmpfs mount
    corrupt: str = ""  # a CORRUPT entry applied to {cache}, a copy of a built fixture cache


def row(argv: str, code: int, says: str, *needs: str, corrupt: str = "") -> Row:
    return Row(tuple(argv.split()), code, says, needs, corrupt)


FX = "--fixtures-dir {fx} --cache-dir {cache}"  # a fixtures folder, its lock and built cache


TABLE: dict[str, dict[str, Row]] = {
    "tinykit": {
        "no command": row("", 2, "required"),
        "unknown command": row("frobnicate", 2, "unknown command"),
        "unknown option": row("make-tiny llama --no-such-option", 2, "unrecognized"),
    },
    "make-tiny": {
        "missing folder": row("make-tiny {in}/nope -o {out}/t", 2, "nope"),
        "empty folder": row("make-tiny {in}/empty -o {out}/t", 2, "config"),
        "config not json": row("make-tiny {in}/cfg-bad -o {out}/t", 2, "config"),
        "config a list": row("make-tiny {in}/cfg-list -o {out}/t", 2, "config"),
        "unknown model_type": row("make-tiny {in}/cfg-unknown -o {out}/t", 2, "no_such_model"),
        "unknown bare type": row("make-tiny no_such_model_type -o {out}/t", 2, "no_such"),
        "hidden not a number": row("make-tiny llama --hidden abc", 2, "--hidden"),
        "layers not a number": row("make-tiny llama --layers many", 2, "--layers"),
        "dtype unknown": row("make-tiny llama --dtype float8", 2, "--dtype"),
        "mode unknown": row("make-tiny llama --mode huge", 2, "--mode"),
        "hidden zero": row("make-tiny llama --hidden 0 -o {out}/t", 2, "hidden"),
        "hidden negative": row("make-tiny llama --hidden -8 -o {out}/t", 2, "hidden"),
        "output exists": row("make-tiny llama -o {in}/empty-out", 2, "--force"),
        "recipe missing": row("make-tiny llama --recipe {in}/nope.toml -o {out}/t", 2, "nope"),
        "recipe not toml": row("make-tiny llama --recipe {in}/bad.toml -o {out}/t", 2, "bad.toml"),
        "class unknown": row(
            "make-tiny llama --class LlamaForSequenceClasification -o {out}/t", 2, "Did you mean"
        ),
        "class of another type": row(
            "make-tiny llama --class BertModel -o {out}/t", 2, "another model type"
        ),
        "task unknown": row("make-tiny llama --task causl-lm -o {out}/t", 2, "'causal-lm'"),
        "task the type lacks": row(
            "make-tiny llama --task masked-lm -o {out}/t", 2, "sequence-classification"
        ),
        "class and task disagree": row(
            "make-tiny bert --class BertModel --task masked-lm -o {out}/t", 2, "not both"
        ),
        "num-labels zero": row("make-tiny llama --num-labels 0 -o {out}/t", 2, "num_labels"),
        "num-labels not a number": row("make-tiny llama --num-labels many", 2, "--num-labels"),
        "preset unknown": row("make-tiny llama --preset hub-tiny-randm", 2, "'hub-tiny-random'"),
        "exact vocab, faithful": row(
            f"make-tiny {BERT} --mode faithful --exact-vocab -o {{out}}/t", 2, "--exact-vocab"
        ),
        "exact vocab, no text": row(
            f"make-tiny {VIT} --exact-vocab -o {{out}}/t", 2, "takes no text"
        ),
        "chat template missing": row(
            "make-tiny llama --chat-template {in}/nope.jinja -o {out}/t", 2, "nope.jinja"
        ),
        "chat template empty": row(
            "make-tiny llama --chat-template {in}/empty.jinja -o {out}/t", 2, "empty"
        ),
        "tokenizer source missing": row(
            "make-tiny llama --tokenizer {in}/nope -o {out}/t", 2, "nope"
        ),
        "faithful, tokenizer does not load": row(
            "make-tiny {in}/faithful-bad --mode faithful -o {out}/t", 2, "do not load"
        ),
        "recipe architectures not a list": row(
            "make-tiny bert --recipe {in}/arch-str.toml -o {out}/t", 2, "architectures"
        ),
        "output parent a file": row("make-tiny llama -o {in}/a-file/t", 3, "a-file"),
        "remote code, not trusted": row(
            "make-tiny {in}/remote-code -o {out}/t", 2, "--trust-remote-code"
        ),
        "remote code, files missing": row(
            "make-tiny {in}/remote-code-no-py -o {out}/t --trust-remote-code",
            2,
            "modeling_tinyrc.py",
        ),
        "disk full": row("make-tiny llama -o {full}/t", 3, "space", "full"),
        "read-only fs": row("make-tiny llama -o {ro}/t", 3, "read-only", "ro"),
    },
    "make-tiny-tokenizer": {
        "missing folder": row("make-tiny-tokenizer {in}/nope -o {out}/t", 2, "nope"),
        "no tokenizer files": row("make-tiny-tokenizer {in}/empty -o {out}/t", 2, "tokenizer"),
        "corrupt tokenizer.json": row(
            "make-tiny-tokenizer {in}/tok-bad -o {out}/t", 2, "tokenizer"
        ),
        "vocab not a number": row("make-tiny-tokenizer {in}/tok-bad --vocab lots", 2, "--vocab"),
        "vocab zero": row(f"make-tiny-tokenizer {BERT} --vocab 0 -o {{out}}/t", 2, "vocab"),
        "output exists": row(f"make-tiny-tokenizer {BERT} -o {{in}}/empty-out", 2, "--force"),
        "output parent a file": row(f"make-tiny-tokenizer {BERT} -o {{in}}/a-file/t", 3, "a-file"),
        "disk full": row(f"make-tiny-tokenizer {BERT} -o {{full}}/t", 3, "space", "full"),
        "read-only fs": row(f"make-tiny-tokenizer {BERT} -o {{ro}}/t", 3, "read-only", "ro"),
    },
    "make-tiny-dataset": {
        "missing file": row("make-tiny-dataset {in}/nope.jsonl -o {out}/d", 2, "nope"),
        "empty jsonl": row("make-tiny-dataset {in}/empty.jsonl -o {out}/d", 2, "no rows"),
        "corrupt parquet": row("make-tiny-dataset {in}/bad.parquet -o {out}/d", 2, "Parquet"),
        "not json rows": row("make-tiny-dataset {in}/bad.jsonl -o {out}/d", 2, "JSON"),
        "rows zero": row("make-tiny-dataset {in}/rows.jsonl --rows 0", 2, "--rows"),
        "rows negative": row("make-tiny-dataset {in}/rows.jsonl --rows -3", 2, "--rows"),
        "rows huge": row("make-tiny-dataset {in}/rows.jsonl --rows 1000000000", 2, "--rows"),
        "rows not a number": row("make-tiny-dataset {in}/rows.jsonl --rows many", 2, "--rows"),
        "unknown split": row(
            "make-tiny-dataset {in}/rows.jsonl --split nope -o {out}/d", 2, "nope"
        ),
        "output a file": row("make-tiny-dataset {in}/rows.jsonl -o {in}/a-file", 2, "a-file"),
        "output exists": row("make-tiny-dataset {in}/rows.jsonl -o {in}/full-out", 2, "--force"),
        "output parent a file": row(
            "make-tiny-dataset {in}/rows.jsonl -o {in}/a-file/d", 3, "a-file"
        ),
        "disk full": row("make-tiny-dataset {in}/rows.jsonl -o {full}/d", 3, "space", "full"),
        "read-only fs": row("make-tiny-dataset {in}/rows.jsonl -o {ro}/d", 3, "read-only", "ro"),
    },
    "make-synthetic-dataset": {
        "features missing": row("make-synthetic-dataset --features {in}/nope.json", 2, "nope"),
        "features not json": row("make-synthetic-dataset --features {in}/bad.json", 2, "not JSON"),
        "features a list": row("make-synthetic-dataset --features {in}/list.json", 2, "list"),
        "features empty": row("make-synthetic-dataset --features {in}/empty.json", 2, "dict"),
        "features bad type": row(
            "make-synthetic-dataset --features {in}/feat-bad.json", 2, "Features"
        ),
        "no schema at all": row("make-synthetic-dataset", 2, "required"),
        "both schemas": row("make-synthetic-dataset x --features {in}/feat.json", 2, "not allowed"),
        "rows zero": row("make-synthetic-dataset --features {in}/feat.json --rows 0", 2, "--rows"),
        "rows huge": row(
            "make-synthetic-dataset --features {in}/feat.json --rows 99999999", 2, "--rows"
        ),
        "seed not a number": row(
            "make-synthetic-dataset --features {in}/feat.json --seed x", 2, "--seed"
        ),
        "rows per split not a count": row(
            "make-synthetic-dataset --features {in}/feat.json --rows train=x -o {out}/d",
            2,
            "--rows",
        ),
        "rows per split zero": row(
            "make-synthetic-dataset --features {in}/feat.json --rows train=0 -o {out}/d",
            2,
            "rows['train']=0",
        ),
        "rows per split repeated": row(
            "make-synthetic-dataset --features {in}/feat.json --rows a=1,a=2 -o {out}/d",
            2,
            "repeats",
        ),
        "rows name a split the source lacks": row(
            "make-synthetic-dataset {in}/rows.jsonl --rows validation=2 -o {out}/d", 2, "validation"
        ),
        "output exists": row(
            "make-synthetic-dataset --features {in}/feat.json -o {in}/full-out", 2, "--force"
        ),
        "output parent a file": row(
            "make-synthetic-dataset --features {in}/feat.json -o {in}/a-file/d", 3, "a-file"
        ),
        "disk full": row(
            "make-synthetic-dataset --features {in}/feat.json -o {full}/d", 3, "space", "full"
        ),
        "read-only fs": row(
            "make-synthetic-dataset --features {in}/feat.json -o {ro}/d", 3, "read-only", "ro"
        ),
    },
    "verify": {
        "missing folder": row("verify {in}/nope", 2, "nope"),
        "empty folder": row("verify {in}/empty", 2, "config"),
        "config not json": row("verify {in}/cfg-bad", 2, "config"),
        "weights missing": row("verify {model}/no-weights", 1, "safetensors"),
        "weights truncated": row("verify {model}/truncated", 1, "safetensors"),
        "weights garbage": row("verify {model}/garbage", 1, "safetensors"),
        "config mismatched": row("verify {model}/mismatched", 1, "do not load"),
        "architecture misspelled": row(
            "verify {model}/arch-typo", 2, "Did you mean 'LlamaForCausalLM'?"
        ),
        "own code, not trusted": row("verify {model}/remote-code", 2, "--trust-remote-code"),
    },
    "env": {
        "capture parent a file": row("env capture -o {in}/a-file/env.json", 2, "a-file"),
        "capture disk full": row("env capture -o {full}/env.json", 3, "space", "full"),
        "capture read-only": row("env capture -o {ro}/env.json", 3, "read-only", "ro"),
        "diff missing": row("env diff {in}/nope.json {in}/nope2.json", 2, "nope"),
        "diff not json": row("env diff {in}/bad.json {in}/bad.json", 2, "bad.json"),
        "diff a list": row("env diff {in}/list.json {in}/list.json", 2, "list.json"),
        "no action": row("env", 2, "required"),
    },
    "coverage": {
        "unknown type": row("coverage no_such_model_type", 2, "no_such_model_type"),
        "no workers": row("coverage bert --jobs 0", 2, "--jobs 0"),
        "workers not a number": row("coverage bert --jobs x", 2, "--jobs"),
        "unknown type with workers": row("coverage no_such_model_type --jobs 2", 2, "no_such"),
    },
    "check-determinism": {
        "no colon": row("check-determinism justaname", 2, "justaname"),
        "missing module": row(
            "check-determinism no_such_module_xyz:f --mode inprocess", 2, "no_such"
        ),
        "missing function": row("check-determinism {in}/fns.py:nope --mode inprocess", 2, "nope"),
        "not callable": row("check-determinism {in}/fns.py:number --mode inprocess", 2, "int"),
        "function raises": row("check-determinism {in}/fns.py:raises --mode inprocess", 2, "boom"),
        "function hangs": row("check-determinism {in}/fns.py:hangs --timeout 1", 1, "timeout"),
        "runs one": row("check-determinism {in}/fns.py:raises --runs 1", 2, "--runs"),
        "runs not a number": row("check-determinism {in}/fns.py:raises --runs x", 2, "--runs"),
        "timeout zero": row("check-determinism {in}/fns.py:raises --timeout 0", 2, "--timeout"),
        "timeout negative": row(
            "check-determinism {in}/fns.py:raises --timeout -1", 2, "--timeout"
        ),
        "timeout nan": row("check-determinism {in}/fns.py:raises --timeout nan", 2, "--timeout"),
        "atol negative": row("check-determinism {in}/fns.py:raises --atol -1", 2, "atol"),
        "mode unknown": row("check-determinism {in}/fns.py:raises --mode threads", 2, "--mode"),
    },
    "dist-check": {
        "timeout negative": row("dist-check --timeout -1", 2, "--timeout"),
        "timeout zero": row("dist-check --timeout 0", 2, "--timeout"),
        "timeout inf": row("dist-check --timeout inf", 2, "--timeout"),
        "timeout not a number": row("dist-check --timeout soon", 2, "--timeout"),
        "nproc zero": row("dist-check --nproc 0", 2, "--nproc"),
        "nproc huge": row("dist-check --nproc 100000", 2, "--nproc"),
        "backend unknown": row("dist-check --backend mpi", 2, "--backend"),
    },
    "fixtures": {
        "build dir missing": row("fixtures build --fixtures-dir {in}/nope", 2, "nope"),
        "build dir empty": row("fixtures build --fixtures-dir {in}/empty", 2, "no *.toml"),
        "verify dir empty": row("fixtures verify --fixtures-dir {in}/empty", 2, "lock"),
        "lock dir missing": row("fixtures lock --fixtures-dir {in}/nope", 2, "nope"),
        "spec not toml": row("fixtures build --fixtures-dir {in}/toml-bad", 2, "TOML"),
        "no action": row("fixtures", 2, "required"),
        # a corrupt cache entry, per file kind, with rebuilding off: named, left as it is
        "build: weights truncated": row(
            f"fixtures build {FX} --no-rebuild", 3, "cache clear", corrupt="weights truncated"
        ),
        "build: config edited": row(
            f"fixtures build {FX} --no-rebuild", 3, "cache clear", corrupt="config edited"
        ),
        "build: tokenizer missing": row(
            f"fixtures build {FX} --no-rebuild", 3, "cache clear", corrupt="tokenizer missing"
        ),
        "build: parquet truncated": row(
            f"fixtures build {FX} --no-rebuild", 3, "cache clear", corrupt="parquet truncated"
        ),
        "build: metadata unreadable": row(
            f"fixtures build {FX} --no-rebuild", 3, "metadata", corrupt="metadata unreadable"
        ),
        "verify: weights truncated": row(
            f"fixtures verify {FX} --no-rebuild", 3, "cache clear", corrupt="weights truncated"
        ),
        "lock: weights truncated": row(
            f"fixtures lock {FX} --no-rebuild", 3, "cache clear", corrupt="weights truncated"
        ),
        "lock: artifact fails its check": row(
            f"fixtures lock {FX}", 1, "Refusing to lock fixture 'tiny-m'", corrupt="fails check"
        ),
    },
    "cache": {
        "no action": row("cache", 2, "required"),
    },
    "mem": {
        "no action": row("mem", 2, "required"),
        "no command": row("mem run", 2, "no command to measure"),
        "command not found": row("mem run -- no-such-command-x", 2, "not found on PATH"),
        "plot not a png": row("mem run --plot {out}/m.svg -- true", 2, "*.png"),
        "plot folder missing": row("mem run --plot {out}/no/m.png -- true", 2, "does not exist"),
        "project missing folder": row("mem project {in}/nope", 2, "nope"),
        "project bad layers": row("mem project {in}/nope --layers 2,1", 2, "LO < HI"),
        "project bad seq": row("mem project {in}/nope --seq 0", 2, "--seq"),
    },
    "dumps": {
        "missing folder": row("dumps diff {in}/nope {in}/nope", 2, "nope"),
        "not a dump": row("dumps diff {in}/empty {in}/empty", 2, "not a tinykit dump"),
        "a file": row("dumps diff {in}/a-file {in}/a-file", 2, "a-file"),
        "manifest not json": row("dumps diff {in}/cfg-bad {in}/cfg-bad", 2, "no manifest"),
        "atol negative": row("dumps diff {in}/empty {in}/empty --atol -1", 2, "--atol"),
        "no action": row("dumps", 2, "required"),
    },
    "hub serve": {
        "missing folder": row("hub serve {in}/nope", 2, "nope"),
        "a file": row("hub serve {in}/a-file", 2, "a-file"),
        "port too big": row("hub serve {in}/empty --port 99999", 2, "--port"),
        "port negative": row("hub serve {in}/empty --port -1", 2, "--port"),
        "port not a number": row("hub serve {in}/empty --port http", 2, "--port"),
        "read timeout zero": row("hub serve {in}/empty --read-timeout 0", 2, "--read-timeout"),
        "no action": row("hub", 2, "required"),
    },
    "standins": {
        "no action": row("standins", 2, "required"),
        "manifest missing": row("standins build {in}/nope.toml -o {out}/h", 2, "nope.toml"),
        "manifest not toml": row("standins build {in}/bad.toml -o {out}/h", 2, "not valid TOML"),
        "unknown field": row("standins build {in}/standins-typo.toml -o {out}/h", 2, "'hiden'"),
        "bad repo id": row("standins build {in}/standins-id.toml -o {out}/h", 2, "repo id"),
        "unknown source": row("standins build {in}/standins-src.toml -o {out}/h", 2, "o/n"),
        "no -o": row("standins build {in}/standins-typo.toml", 2, "--out"),
        "output exists": row(
            "standins build {in}/standins-src.toml -o {in}/empty-out", 2, "--force"
        ),
        "discover: no command": row("standins discover -o {out}/m.toml --", 2, "no command"),
        "discover: not found": row("standins discover -- {in}/no-such-cmd", 2, "no-such-cmd"),
    },
}

FNS = """
import time
number = 3
def raises():
    raise ValueError("boom")
def hangs():
    time.sleep(600)
"""


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
    return base


# A model folder with its own code (auto_map, a model_type transformers lacks): a Llama under
# another name. Importing it leaves a file at `ran`, so a test sees whether the code ran.
REMOTE_CONFIG = """
from pathlib import Path
from transformers.models.llama.configuration_llama import LlamaConfig
Path({ran!r}).write_text("the remote code ran")
class TinyRCConfig(LlamaConfig):
    model_type = "tinyrc"
"""
REMOTE_MODELING = """
from transformers.models.llama.modeling_llama import LlamaForCausalLM
from .configuration_tinyrc import TinyRCConfig
class TinyRCForCausalLM(LlamaForCausalLM):
    config_class = TinyRCConfig
"""


def write_remote_code(folder: Path, ran: Path) -> Path:
    folder.mkdir()
    (folder / "configuration_tinyrc.py").write_text(REMOTE_CONFIG.format(ran=str(ran)))
    (folder / "modeling_tinyrc.py").write_text(REMOTE_MODELING)
    config = {
        "model_type": "tinyrc",
        "architectures": ["TinyRCForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_tinyrc.TinyRCConfig",
            "AutoModelForCausalLM": "modeling_tinyrc.TinyRCForCausalLM",
        },
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 32000,
    }
    (folder / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json"):  # a real tokenizer to shrink
        shutil.copyfile(HUB_FILES / "meta-llama" / "Llama-2-7b-hf" / name, folder / name)
    return folder


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


def _entry(cache: Path, kind: str) -> Path:
    """The artifact folder of the one cached entry of ``kind``."""
    for meta in (cache / "artifacts").glob("*/tinykit-cache.json"):
        if json.loads(meta.read_text())["kind"] == kind:
            return meta.parent / json.loads(meta.read_text())["name"]
    raise AssertionError(f"no {kind} in {cache}")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _fails_check(model: Path) -> None:
    """A model that does not load (config and weights disagree), recorded as built: the cache
    finds it intact, and only the artifact's own check (verify) can tell."""
    config = json.loads((model / "config.json").read_text())
    config["hidden_size"] *= 2
    (model / "config.json").write_text(json.dumps(config))
    meta_path = model.parent / "tinykit-cache.json"
    meta = json.loads(meta_path.read_text())
    meta["files"] = file_hashes(model)
    meta_path.write_text(json.dumps(meta))


CORRUPT = {
    "weights truncated": lambda c: _truncate(_entry(c, "model") / "model.safetensors"),
    "config edited": lambda c: (_entry(c, "model") / "config.json").write_text("{}"),
    "tokenizer missing": lambda c: (_entry(c, "model") / "tokenizer.json").unlink(),
    "parquet truncated": lambda c: _truncate(
        next((_entry(c, "synthetic_dataset") / "data").glob("*.parquet"))
    ),
    "metadata unreadable": lambda c: (_entry(c, "model").parent / "tinykit-cache.json").write_text(
        "{oops"
    ),
    "fails check": lambda c: _fails_check(_entry(c, "model")),
}


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


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None
        for p in sorted(folder.rglob("*"))
    }


CASES = [(command, name) for command, rows in TABLE.items() for name in rows]


@pytest.mark.parametrize("command,name", CASES, ids=[f"{c}: {n}" for c, n in CASES])
def test_fault(command, name, inputs, request, tmp_path, monkeypatch, capsys):
    r = TABLE[command][name]
    places = {"in": str(inputs), "out": str(tmp_path / "out")}
    if "{model}" in " ".join(r.argv):
        places["model"] = str(request.getfixturevalue("model"))
    if "{cache}" in " ".join(r.argv):  # a private copy of a built, locked fixture cache
        shutil.copytree(request.getfixturevalue("built_fixtures"), tmp_path / "fixtures")
        places |= {
            "fx": str(tmp_path / "fixtures" / "fx"),
            "cache": str(tmp_path / "fixtures" / "cache"),
        }
        CORRUPT[r.corrupt](tmp_path / "fixtures" / "cache")
    if r.needs:
        mounts = request.getfixturevalue("mounts")
        for need in r.needs:
            if not isinstance(mounts[need], Path):
                pytest.skip(f"cannot mount a tmpfs for this case: {mounts[need]}")
            places[need] = str(mounts[need])
    argv = [a.format(**places) for a in r.argv]
    watched = [Path(p) for k, p in places.items() if k != "model"]
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path / "out")  # default output names land here, where we look
    before = {str(p): _tree(p) for p in watched if p.is_dir()}
    capsys.readouterr()  # drop what building the `model` fixture printed: judge the command alone
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code
    err = capsys.readouterr().err
    assert code == r.code, err
    # stage lines ("tinykit: resolving ...") may come first; the error is one line, the last
    lines = err.splitlines()
    assert err.endswith("\n") and lines, err
    assert all(_is_stage(line) for line in lines[:-1]) and not _is_stage(lines[-1]), err
    assert "Traceback" not in err and r.says in err, err
    assert {str(p): _tree(p) for p in watched if p.is_dir()} == before  # nothing written or left


def _is_stage(line: str) -> bool:
    return line.startswith("tinykit: ") and not line.startswith("tinykit: error:")


# -- signals and concurrent writers: real processes -----------------------------------------


def _tinykit(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "tinykit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,
    )


def test_sigterm_mid_write_leaves_no_temp_folder(tmp_path):
    sig, code = signal.SIGTERM, 143  # SIGINT (130) takes the very same path: KeyboardInterrupt
    proc = _tinykit("make-tiny", "llama", "-o", str(tmp_path / "t"))
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".t.tmp-*")) and proc.poll() is None:
        assert time.monotonic() < deadline, "make-tiny never started writing"
        time.sleep(0.02)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:  # finished before the signal landed: still nothing half-written
        assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]
        return
    assert proc.returncode == code, err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


def test_sigterm_stops_hub_serve_and_removes_its_lfs_folder(tmp_path):
    before = set(Path("/tmp").glob("tinykit-hub-lfs-*"))
    proc = _tinykit("hub", "serve", str(tmp_path), "--quiet")
    assert "Serving" in proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == ""
    assert set(Path("/tmp").glob("tinykit-hub-lfs-*")) <= before


def test_a_stale_temp_folder_of_a_killed_run_is_removed_by_the_next_write(tmp_path, inputs):
    stale = tmp_path / ".d.tmp-999999999-dead"  # the pid of no process
    stale.mkdir()
    (stale / "half.parquet").write_bytes(b"half")
    args = ["make-synthetic-dataset", "--features", str(inputs / "feat.json"), "-o"]
    assert main([*args, str(tmp_path / "d"), "--rows", "2"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_two_concurrent_writers_into_one_folder_end_in_one_result_and_one_line(tmp_path):
    args = ("make-tiny-tokenizer", str(BERT), "-o")
    procs = [_tinykit(*args, str(tmp_path / "d"), cwd=tmp_path) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 0], [0, 2]), results
    for code, err in results:
        assert "Traceback" not in err and (code == 0 or err.count("\n") == 1), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    assert (tmp_path / "d" / "tokenizer.json").is_file()


# -- the same faults with rebuilding on: repaired, never served -------------------------------


def test_corrupt_cache_entries_are_rebuilt_by_fixtures_build_verify_and_the_plugin(
    built_fixtures, tmp_path, capsys
):
    from tinykit.artifacts.cache import Cache
    from tinykit.pytest_plugin.fixtures import Factory, TinyModel

    shutil.copytree(built_fixtures, tmp_path / "f")
    fx, cache = tmp_path / "f" / "fx", tmp_path / "f" / "cache"
    locked = json.loads((fx / "lock.json").read_text())["fixtures"]
    args = ["--fixtures-dir", str(fx), "--cache-dir", str(cache)]
    CORRUPT["parquet truncated"](cache)
    capsys.readouterr()
    assert main(["fixtures", "build", *args]) == 0  # rebuilt, not "exit 0 and serve it"
    assert "is corrupt (data/train-00000-of-00001.parquet changed" in capsys.readouterr().err
    assert file_hashes(_entry(cache, "synthetic_dataset")) == locked["tiny-d"]["files"]
    CORRUPT["weights truncated"](cache)
    assert main(["fixtures", "verify", *args]) == 0  # rebuilt: nothing to advise locking
    out, err = capsys.readouterr()
    assert "2 fixture(s) match lock.json" in out and "fixtures lock" not in out + err
    assert "is corrupt (model.safetensors changed" in err
    assert file_hashes(_entry(cache, "model")) == locked["tiny-m"]["files"]
    CORRUPT["weights truncated"](cache)
    # the tiny_model fixture's factory, as a test calls it: a model, never a SafetensorError
    factory = Factory(TinyModel, "model", Cache(cache), (fx,), {})
    model = factory("tiny-m")
    assert type(model.model).__name__ == "LlamaForCausalLM"
    assert file_hashes(model.path) == locked["tiny-m"]["files"]


def test_a_local_folder_with_its_own_code_builds_and_verifies_when_trusted(tmp_path, capsys):
    source = write_remote_code(tmp_path / "src", ran=tmp_path / "ran")
    out = tmp_path / "tiny"
    assert main(["make-tiny", str(source), "-o", str(out), "--trust-remote-code"]) == 0
    assert (tmp_path / "ran").is_file()  # the code ran, as asked
    assert {"configuration_tinyrc.py", "modeling_tinyrc.py", "tokenizer.json"} <= {
        p.name for p in out.iterdir()
    }
    capsys.readouterr()
    assert main(["verify", str(out), "--trust-remote-code"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("OK")
    (tmp_path / "ran").unlink()
    assert main(["verify", str(out)]) == 2  # untrusted: refused before the code runs
    assert not (tmp_path / "ran").exists()


# -- distributed: a rank that leaves early ----------------------------------------------------


def leaves_early():
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 1:
        os._exit(0)  # leaves without a word: no exception, exit status 0
    dist.all_reduce(torch.ones(1))  # rank 0 then fails here, and its error is seen first
    return "unreachable"


def test_a_rank_that_exits_early_with_code_0_is_the_one_blamed(dist_launch):
    from tinykit.errors import DistributedTestFailed

    with pytest.raises(DistributedTestFailed) as info:
        dist_launch(leaves_early, world_size=2, timeout=30, fresh=True)
    head = str(info.value).splitlines()[0]
    assert info.value.exit_code == 1 and "Traceback" not in head
    assert "failed: rank 1 exited early with code 0 before returning (it left the job)" in head
    assert [r["exit_code"] for r in info.value.per_rank] == [None, 0]
