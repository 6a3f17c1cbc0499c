"""Broken inputs for the fault table: how each one is made from a good one."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from conftest import HUB_FILES

from tinykit._files import file_hashes

FNS = """
import time
number = 3
def raises():
    raise ValueError("boom")
def hangs():
    time.sleep(600)
"""


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


def cache_entry(cache: Path, kind: str) -> Path:
    """The artifact folder of the one cached entry of ``kind``."""
    for meta in (cache / "artifacts").glob("*/tinykit-cache.json"):
        if json.loads(meta.read_text())["kind"] == kind:
            return meta.parent / json.loads(meta.read_text())["name"]
    raise AssertionError(f"no {kind} in {cache}")


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def fails_check(model: Path) -> None:
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
    "weights truncated": lambda c: truncate(cache_entry(c, "model") / "model.safetensors"),
    "config edited": lambda c: (cache_entry(c, "model") / "config.json").write_text("{}"),
    "tokenizer missing": lambda c: (cache_entry(c, "model") / "tokenizer.json").unlink(),
    "parquet truncated": lambda c: truncate(
        next((cache_entry(c, "synthetic_dataset") / "data").glob("*.parquet"))
    ),
    "metadata unreadable": lambda c: (
        cache_entry(c, "model").parent / "tinykit-cache.json"
    ).write_text("{oops"),
    "fails check": lambda c: fails_check(cache_entry(c, "model")),
}


# -- safetensors: a good file's header, rewritten -------------------------------------------


def read_safetensors(path: Path) -> tuple[dict, bytes]:
    """(header, data) of a safetensors file."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def write_safetensors(path: Path, header: object, data: bytes) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def first_tensor(header: dict) -> str:
    return next(k for k in header if k != "__metadata__")


def bad_offsets(path: Path) -> None:
    header, data = read_safetensors(path)
    header[first_tensor(header)]["data_offsets"] = [0, 10**9]
    write_safetensors(path, header, data)


def bad_dtype(path: Path) -> None:
    header, data = read_safetensors(path)
    header[first_tensor(header)]["dtype"] = "F128"
    write_safetensors(path, header, data)


def header_a_list(path: Path) -> None:
    write_safetensors(path, [1, 2, 3], read_safetensors(path)[1])


def sharded(folder: Path, index: str) -> None:
    """model.safetensors split into a 'two-shard' layout with `index` as its index file."""
    weights = folder / "model.safetensors"
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        shutil.copyfile(weights, folder / name)
    weights.unlink()
    (folder / "model.safetensors.index.json").write_text(index)


# -- dumps: a good recording, edited ---------------------------------------------------------


def edit_index(dump: Path, edit) -> None:
    lines = (dump / "index.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    edit(records)
    (dump / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def edit_manifest(dump: Path, edit) -> None:
    manifest = json.loads((dump / "manifest.json").read_text())
    edit(manifest)
    (dump / "manifest.json").write_text(json.dumps(manifest))
