"""make_tiny_dataset on Hub dataset ids, served by the loopback Hub (`tiny_hub`)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile as sf
from dataset_sources import (
    audiofolder,
    chat_jsonl,
    image_text_parquet,
    imagefolder,
    multi_config_repo,
)
from PIL import Image

import tinykit
from tinykit.cli import main


def parquet_bytes(result):
    folder = Path(result)  # a builder's result stands in for its folder
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*.parquet"))
    }


def test_multi_config_repo_keeps_configs_splits_features_and_pins_the_revision(tiny_hub, tmp_path):
    repo = multi_config_repo(tmp_path / "src")
    tiny_hub.add_dataset("sklearn/tables", repo)
    out = tinykit.make_tiny_dataset("sklearn/tables", rows=4, out=tmp_path / "tiny")
    sha = (
        datasets.load_dataset_builder("sklearn/tables", "iris")
        .config.data_files["train"][0]
        .split("@")[1][:40]
    )
    assert datasets.get_dataset_config_names(str(out)) == ["iris", "wine"]
    for config in ("iris", "wine"):
        source, tiny = (
            datasets.load_dataset("sklearn/tables", config),
            datasets.load_dataset(str(out), config),
        )
        for split in ("train", "test"):
            assert tiny[split].features == source[split].features
            assert set(tiny[split]["label"]) == set(source[split]["label"])
            assert len(tiny[split]) == 4
    card = (out / "README.md").read_text()
    assert "\nlicense: bsd-3-clause\n" in card
    assert f"at revision `{sha}`" in card
    assert f"tinykit make-tiny-dataset sklearn/tables --rows 4 --revision {sha} -o tiny" in card
    # the same rows read from the Hub or from disk give the same parquet bytes
    local = tinykit.make_tiny_dataset(repo, rows=4, out=tmp_path / "local")
    assert parquet_bytes(out) == parquet_bytes(local)


def test_imagefolder_and_image_text_parquet_from_the_hub(tiny_hub, tmp_path):
    tiny_hub.add_dataset("mnist/digits", imagefolder(tmp_path / "a"))
    tiny_hub.add_dataset("mnist/captions", image_text_parquet(tmp_path / "b").parent)
    for repo_id in ("mnist/digits", "mnist/captions"):
        out = tinykit.make_tiny_dataset(repo_id, rows=6, out=tmp_path / repo_id.replace("/", "-"))
        source = datasets.load_dataset(repo_id, split="train")
        tiny = datasets.load_dataset(str(out), split="train")
        assert tiny.features == source.features
        assert all(max(img.size) <= 32 for img in tiny["image"] if img is not None)
    assert any(f.endswith(".png") for f in tiny_hub.log.files_downloaded("mnist/digits"))


def test_audio_and_conversations_from_the_hub(tiny_hub, tmp_path):
    tiny_hub.add_dataset("speech/tones", audiofolder(tmp_path / "a"))
    tiny_hub.add_dataset("chat/docs", chat_jsonl(tmp_path / "b").parent)
    out = tinykit.make_tiny_dataset("speech/tones", rows=3, out=tmp_path / "tones")
    clips = datasets.load_dataset(str(out), split="train").cast_column(
        "audio", datasets.Audio(decode=False)
    )
    assert clips.features["audio"] == datasets.Audio(decode=False) and len(clips) == 3
    for clip in clips["audio"]:
        info = sf.info(io.BytesIO(clip["bytes"]))
        assert info.frames <= info.samplerate
    out = tinykit.make_tiny_dataset("chat/docs", rows=3, out=tmp_path / "chat")
    tiny = datasets.load_dataset(str(out), split="train")
    assert tiny.features == datasets.load_dataset("chat/docs", split="train").features


def test_a_large_parquet_file_is_read_by_ranges_not_downloaded(tiny_hub, tmp_path):
    rows_per_group, groups = 1_000, 24  # ~24 MB in 24 row groups of ~1 MB
    path = tmp_path / "big" / "data" / "train-00000-of-00001.parquet"
    path.parent.mkdir(parents=True)
    rng = np.random.default_rng(0)
    with pq.ParquetWriter(path, pa.schema([("text", pa.string())]), compression="none") as writer:
        for _ in range(groups):
            blob = rng.integers(97, 123, rows_per_group * 1_000, dtype=np.uint8).tobytes().decode()
            texts = [blob[i * 1_000 : (i + 1) * 1_000] for i in range(rows_per_group)]
            writer.write_table(pa.table({"text": texts}))
    tiny_hub.add_dataset("big/text", tmp_path / "big")
    out = tinykit.make_tiny_dataset("big/text", rows=10, out=tmp_path / "tiny")
    assert datasets.load_dataset(str(out), split="train").num_rows == 10
    gets = [
        r
        for r in tiny_hub.log.records
        if r.method == "GET" and r.filename and r.filename.endswith(".parquet")
    ]
    assert gets and all(r.status in (206, 302) and r.range for r in gets), "only ranged reads"
    sent = sum(
        int(b) - int(a) + 1 for a, b in (r.range[6:].split("-") for r in gets if r.status == 206)
    )
    assert sent < 0.15 * path.stat().st_size, f"read {sent:,} of {path.stat().st_size:,} bytes"


@pytest.mark.parametrize(
    "argv, code, expected",
    [
        (["nobody/nothing"], 3, "HubError: Hub repo 'nobody/nothing' was not found"),
        (["sklearn/tables", "--revision", "v9"], 3, "Revision 'v9' does not exist"),
        (["sklearn/tables", "--config", "digits"], 2, "Unknown config 'digits'"),
        (["sklearn/tables", "--config", "iris", "--split", "dev"], 2, "Unknown split 'dev'"),
    ],
    ids=["unknown-repo", "unknown-revision", "unknown-config", "unknown-split"],
)
def test_bad_hub_input_is_one_line_and_writes_nothing(
    tiny_hub, tmp_path, capsys, argv, code, expected
):
    tiny_hub.add_dataset("sklearn/tables", multi_config_repo(tmp_path / "src"))
    (tmp_path / "outs").mkdir()
    capsys.readouterr()  # drop the progress bars of building the source
    assert main(["make-tiny-dataset", *argv, "-o", str(tmp_path / "outs" / "tiny")]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err
    assert list((tmp_path / "outs").iterdir()) == []


def test_synthetic_copy_of_a_hub_dataset_schema(tiny_hub, tmp_path):
    tiny_hub.add_dataset("mnist/captions", image_text_parquet(tmp_path / "b").parent)
    out = tinykit.make_synthetic_dataset("mnist/captions", rows=5, out=tmp_path / "synth", seed=3)
    tiny = datasets.load_dataset(str(out), split="train")
    assert tiny.features == datasets.load_dataset("mnist/captions", split="train").features
    assert all(isinstance(i, Image.Image) for i in tiny["image"] if i is not None)
