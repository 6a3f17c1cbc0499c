"""tinykit.strategies (dataset rows for a schema) and make_synthetic_dataset."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow as pa
import pytest
import soundfile as sf
from dataset_sources import multi_config_repo
from datasets import Array2D, Audio, ClassLabel, Features, Image, LargeList, List, Value
from hypothesis import given, settings
from PIL import Image as PILImage

import tinykit
from tinykit.cli import main
from tinykit.errors import UsageError
from tinykit.strategies import dataset_rows, feature_values

RICH = Features(
    {
        "text": Value("string"),
        "label": ClassLabel(names=["neg", "neu", "pos"]),
        "messages": List({"role": Value("string"), "content": Value("string")}),
        "nested": {"id": Value("int32"), "scores": List(Value("float32"), length=3)},
        "tokens": LargeList(Value("int16")),
        "flag": Value("bool"),
        "half": Value("float16"),
        "big": Value("uint64"),
        "blob": Value("binary"),
        "grid": Array2D((2, 3), "int32"),
        "image": Image(),
        "audio": Audio(sampling_rate=8000),
    }
)


@settings(max_examples=40, deadline=None)
@given(rows=dataset_rows(RICH, max_rows=6))
def test_rows_fit_the_arrow_schema_of_their_features(rows):
    table = pa.Table.from_pylist(rows, schema=RICH.arrow_schema)
    assert table.num_rows == len(rows)
    assert datasets.Features.from_arrow_schema(table.schema) == RICH


# Dataset.from_list needs torchcodec to pass audio bytes through, and overflows on uint64 values
# above 2**63 (pyarrow, which tinykit writes with, takes both).
DATASETS_OK = Features({k: RICH[k] for k in RICH if k not in ("audio", "big")})


@settings(max_examples=30, deadline=None)
@given(rows=dataset_rows(DATASETS_OK, max_rows=4))
def test_rows_are_accepted_by_datasets_itself(rows):
    ds = datasets.Dataset.from_list(rows, features=DATASETS_OK)
    assert len(ds) == len(rows)
    for row in ds:  # decoding the images works too
        assert row["image"] is None or max(row["image"].size) <= 32


@settings(max_examples=20, deadline=None)
@given(
    image=feature_values(Image(), allow_missing=False),
    audio=feature_values(Audio(sampling_rate=8000), allow_missing=False),
)
def test_media_values_are_real_files(image, audio):
    assert PILImage.open(io.BytesIO(image["bytes"])).format == "PNG"
    info = sf.info(io.BytesIO(audio["bytes"]))
    assert info.samplerate == 8000 and info.frames <= 800


def test_unsupported_feature_type_is_a_usage_error():
    with pytest.raises(UsageError, match="No strategy for Value dtype 'date32'"):
        feature_values(Value("date32"))


def files_of(folder):
    return {
        p.relative_to(Path(folder)).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(folder).rglob("*"))
        if p.is_file()
    }


def test_synthetic_dataset_loads_with_the_exact_features(tmp_path):
    out = tinykit.make_synthetic_dataset(RICH, rows=25, out=tmp_path / "synth", seed=1)
    ds = datasets.load_dataset(str(out))["train"]
    assert ds.features == RICH and len(ds) == 25
    values = ds.cast_column("audio", Audio(decode=False))
    assert any(v is None for v in values["half"]), "some missing values outside role columns"
    assert None not in values["text"] and None not in values["messages"], "role columns: never None"
    assert len(set(values["text"])) > 5, "varied values"


def test_same_seed_same_bytes_in_another_process_other_seed_differs(tmp_path):
    features_json = tmp_path / "features.json"
    features_json.write_text(json.dumps(RICH.to_dict()))
    here = tinykit.make_synthetic_dataset(
        features_json, rows=10, out=tmp_path / "a" / "synth", seed=7
    )
    code = (
        "import sys, tinykit; "
        f"tinykit.make_synthetic_dataset({str(features_json)!r}, rows=10, "
        f"out={str(tmp_path / 'b' / 'synth')!r}, seed=7)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    assert files_of(here) == files_of(tmp_path / "b" / "synth")
    other = tinykit.make_synthetic_dataset(
        features_json, rows=10, out=tmp_path / "c" / "synth", seed=8
    )
    assert (
        files_of(other)["data/train-00000-of-00001.parquet"]
        != files_of(here)["data/train-00000-of-00001.parquet"]
    )


def test_schema_copied_from_a_dataset_without_its_rows(tmp_path):
    source = multi_config_repo(tmp_path / "src")
    out = tinykit.make_synthetic_dataset(str(source), rows=6, out=tmp_path / "synth")
    assert datasets.get_dataset_config_names(str(out)) == ["iris", "wine"]
    real = datasets.load_dataset(str(source), "wine")
    fake = datasets.load_dataset(str(out), "wine")
    assert sorted(fake) == ["test", "train"]
    assert fake["train"].features == real["train"].features
    real_rows = {tuple(m) for m in real["train"]["measurements"]}
    assert not real_rows & {tuple(m) for m in fake["train"]["measurements"] if m}


def test_cli_from_a_features_file(tmp_path, capsys):
    features_json = tmp_path / "features.json"
    features_json.write_text(
        json.dumps(Features({"q": Value("string"), "y": ClassLabel(names=["a", "b"])}).to_dict())
    )
    out = tmp_path / "synth"
    assert (
        main(
            [
                "make-synthetic-dataset",
                "--features",
                str(features_json),
                "--rows",
                "4",
                "-o",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["splits"] == {"default": {"train": 4}}
    card = (out / "README.md").read_text()
    assert "tinykit make-synthetic-dataset" in card and "seed 0" in card
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"q": {"_type": "NoSuchFeature"}}))
    assert main(["make-synthetic-dataset", "--features", str(bad), "-o", str(tmp_path / "x")]) == 2
    assert "Not a valid Features mapping" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    with pytest.raises(UsageError, match=r"out=4 is not a folder path"):
        tinykit.make_synthetic_dataset(str(bad), 4)
    with pytest.raises(UsageError, match=r"seed='1' is not an integer"):
        tinykit.make_synthetic_dataset(str(bad), tmp_path / "x", seed="1")
