"""Every reader of a file tinykit did not just write, fed random bytes, random truncations and
random JSON edits of a valid file: each outcome is a success or one documented one-line error
(a `tinykit.errors` class with its exit code), never another exception (the CLI's exit 70).

Readers and their files: `slice` (a safetensors file and a shard index), `fixtures verify`
(lock.json), `dumps diff` (a dump's manifest, index and shard).
"""

from __future__ import annotations

import itertools
import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fault_table.broken import read_safetensors, write_safetensors
from tinykit.errors import TinykitError

# no deadline and no too_slow check: both are timings, and a loaded CI box is slow at random
EXAMPLES = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_n = itertools.count()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def damaged(draw, good: bytes, json_file: bool = False) -> bytes:
    """`good` truncated, replaced by random bytes, with bytes flipped, or (JSON) one value edited."""
    how = draw(st.sampled_from(["truncate", "random", "flip"] + (["edit"] if json_file else [])))
    if how == "truncate":
        return good[: draw(st.integers(0, max(0, len(good) - 1)))]
    if how == "random":
        return draw(st.binary(max_size=256))
    if how == "flip":
        data = bytearray(good)
        for _ in range(draw(st.integers(1, 4))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data)
    return edit_json(draw, json.loads(good)).encode()


def edit_json(draw, value: object) -> str:
    """`value` with one node (anywhere in it) replaced by a random JSON value."""
    paths = list(_paths(value))
    path = draw(st.sampled_from(paths))
    new = draw(json_values)
    if not path:
        return json.dumps(new)
    node = value
    for key in path[:-1]:
        node = node[key]  # type: ignore[index]
    node[path[-1]] = new  # type: ignore[index]
    return json.dumps(value)


def _paths(value: object, path: tuple = ()):
    yield path
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else []
    )
    for key, child in items:
        yield from _paths(child, (*path, key))


def documented(call: Callable[[], object]) -> None:
    """Run a reader: a success, or one tinykit error of one line with its exit code."""
    try:
        call()
    except TinykitError as e:
        message = str(e).strip()
        assert e.exit_code in (1, 2, 3) and message and "\n" not in message, repr(message)


# -- slice: a safetensors file, a shard index ------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A 2-layer llama checkpoint of tiny tensors (config.json + model.safetensors)."""
    import torch
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("reader-checkpoint")
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 4, "vocab_size": 8}
    config |= {"num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 4}
    (folder / "config.json").write_text(json.dumps(config))
    tensors = {"model.embed_tokens.weight": torch.ones(8, 4), "lm_head.weight": torch.ones(8, 4)}
    for i in range(2):
        tensors[f"model.layers.{i}.mlp.up_proj.weight"] = torch.full((4, 4), float(i))
        tensors[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(4, dtype=torch.bfloat16)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def _slice(folder: Path, tmp: Path) -> None:
    from tinykit.slice.build import slice_model

    documented(lambda: slice_model(folder, tmp / f"out-{next(_n)}", layers=1))


def _damaged_header(draw, good: bytes) -> bytes:
    """A safetensors file whose JSON header has one value edited (the data kept)."""
    n = struct.unpack("<Q", good[:8])[0]
    header = edit_json(draw, json.loads(good[8 : 8 + n])).encode()
    return struct.pack("<Q", len(header)) + header + good[8 + n :]


@EXAMPLES
@given(data=st.data())
def test_slice_reads_any_safetensors_file_without_crashing(checkpoint, tmp_path, data):
    good = (checkpoint / "model.safetensors").read_bytes()
    whole = data.draw(st.booleans())  # the whole file, or one value of its JSON header
    bad = data.draw(damaged(good)) if whole else _damaged_header(data.draw, good)
    folder = tmp_path / f"src-{next(_n)}"
    shutil.copytree(checkpoint, folder)
    (folder / "model.safetensors").write_bytes(bad)
    _slice(folder, tmp_path)


@EXAMPLES
@given(data=st.data())
def test_slice_reads_any_shard_index_without_crashing(checkpoint, tmp_path, data):
    header, payload = read_safetensors(checkpoint / "model.safetensors")
    folder = tmp_path / f"src-{next(_n)}"
    folder.mkdir()
    shutil.copyfile(checkpoint / "config.json", folder / "config.json")
    shard = "model-00001-of-00001.safetensors"
    write_safetensors(folder / shard, header, payload)
    weight_map = {name: shard for name in header if name != "__metadata__"}
    good = json.dumps({"metadata": {"total_size": len(payload)}, "weight_map": weight_map})
    index = data.draw(damaged(good.encode(), json_file=True))
    (folder / "model.safetensors.index.json").write_bytes(index)
    _slice(folder, tmp_path)


# -- fixtures verify: lock.json --------------------------------------------------------------


@pytest.fixture(scope="module")
def locked(tmp_path_factory) -> tuple[Path, Path]:
    """A fixtures folder (one synthetic dataset) locked, and the cache it was built in."""
    from tinykit.artifacts import named
    from tinykit.artifacts.cache import Cache

    base = tmp_path_factory.mktemp("reader-lock")
    (base / "fx").mkdir()
    (base / "fx" / "f.toml").write_text(
        '[d]\nkind = "synthetic_dataset"\nsource = {t = {dtype = "string", _type = "Value"}}\n'
        "spec = { rows = 2 }\n"
    )
    named.lock(folder=base / "fx", cache=Cache(base / "cache"))
    return base / "fx", base / "cache"


@EXAMPLES
@given(data=st.data())
def test_fixtures_verify_reads_any_lock_file_without_crashing(locked, tmp_path, data):
    from tinykit.artifacts import named
    from tinykit.artifacts.cache import Cache

    fx, cache = locked
    folder = tmp_path / f"fx-{next(_n)}"
    shutil.copytree(fx, folder)
    good = (fx / "lock.json").read_bytes()
    (folder / "lock.json").write_bytes(data.draw(damaged(good, json_file=True)))
    documented(lambda: named.verify(folder=folder, cache=Cache(cache)))


# -- dumps diff: a dump's manifest, index and shard ------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    import torch

    import tinykit

    out = tmp_path_factory.mktemp("reader-dump") / "good"
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    with tinykit.record(net, tensors="full", out=out):
        net(torch.ones(1, 4))
    return out


@EXAMPLES
@given(data=st.data(), part=st.sampled_from(["manifest.json", "index.jsonl", "shard"]))
def test_dumps_diff_reads_any_dump_without_crashing(recorded, tmp_path, data, part):
    from tinykit.numerics.diff import diff_dumps

    folder = tmp_path / f"dump-{next(_n)}"
    shutil.copytree(recorded, folder)
    target = next((folder / "shards").glob("*")) if part == "shard" else folder / part
    good = target.read_bytes()
    if part == "index.jsonl" and data.draw(st.booleans()):  # one record's JSON edited
        lines = good.decode().splitlines()
        i = data.draw(st.integers(0, len(lines) - 1))
        lines[i] = edit_json(data.draw, json.loads(lines[i]))
        bad = ("\n".join(lines) + "\n").encode()
    else:
        bad = data.draw(damaged(good, json_file=part == "manifest.json"))
    target.write_bytes(bad)
    documented(lambda: diff_dumps(recorded, folder))
    documented(lambda: diff_dumps(folder, recorded))
