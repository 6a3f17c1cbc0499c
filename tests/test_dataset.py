"""make_tiny_dataset on local sources: real varied data in, loadable tiny parquet out."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import datasets
import pytest
import soundfile as sf
from dataset_sources import (
    audiofolder,
    chat_jsonl,
    image_text_parquet,
    imagefolder,
    multi_config_repo,
    table_dataset,
    text_jsonl,
)
from PIL import Image

import tinykit
from tinykit.cli import main
from tinykit.errors import UsageError


@pytest.fixture(scope="session")
def src(tmp_path_factory):
    """Every local source, built once per session."""
    root = tmp_path_factory.mktemp("dataset-sources")
    return {
        "text": text_jsonl(root),
        "chat": chat_jsonl(root),
        "tables": multi_config_repo(root),
        "digits": imagefolder(root),
        "image_text": image_text_parquet(root),
        "tones": audiofolder(root),
    }


def load(path, config=None):
    return datasets.load_dataset(str(path), config)


def files_of(folder):
    return {
        p.relative_to(Path(folder)).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(folder).rglob("*"))
        if p.is_file()
    }


def test_text_keeps_features_and_picks_shortest_longest_and_missing(src, tmp_path):
    out = tinykit.make_tiny_dataset(src["text"], rows=6, out=tmp_path / "tiny")
    source = datasets.load_dataset("json", data_files=str(src["text"]), split="train")
    tiny = load(out)["train"]
    assert tiny.features == source.features
    assert len(tiny) == 6
    lengths = [len(t) for t in source["text"] if t]
    kept = tiny["text"]
    assert None in kept, "the record with a missing text is kept"
    assert "" in kept or min(len(t) for t in kept if t) == min(lengths)
    assert max(len(t) for t in kept if t) == max(lengths), "the longest record is kept"
    assert set(tiny["name"]) <= set(source["name"]), "rows are real rows, not made up"


def test_conversational_messages_keep_their_nesting(src, tmp_path):
    out = tinykit.make_tiny_dataset(src["chat"], rows=5, out=tmp_path / "tiny")
    source = datasets.load_dataset("json", data_files=str(src["chat"]), split="train")
    tiny = load(out)["train"]
    assert tiny.features == source.features
    assert tiny.features["messages"] == datasets.List(
        {"role": datasets.Value("string"), "content": datasets.Value("string")}
    )
    by_source = {row["source"]: row["messages"] for row in source}
    for row in tiny:
        assert row["messages"] == by_source[row["source"]]
    assert {len(m) for m in tiny["messages"]} == {2, 3}, "with and without a system turn"


def test_multi_config_multi_split_with_classlabels(src, tmp_path):
    out = tinykit.make_tiny_dataset(src["tables"], rows=4, out=tmp_path / "tiny")
    assert datasets.get_dataset_config_names(str(out)) == ["iris", "wine"]
    assert "\nlicense: bsd-3-clause\n" in (out / "README.md").read_text(), "license copied"
    for config in ("iris", "wine"):
        source, tiny = load(src["tables"], config), load(out, config)
        assert sorted(tiny) == ["test", "train"]
        for split in ("train", "test"):
            assert tiny[split].features == source[split].features
            assert (
                tiny[split].features["label"].names == table_dataset(config).features["label"].names
            )
            # every label present in the source split survives, even with 4 rows for 3 labels
            assert set(tiny[split]["label"]) == set(source[split]["label"])
            assert len(tiny[split]) == 4


def test_only_the_configs_and_splits_asked_for(src, tmp_path):
    out = tinykit.make_tiny_dataset(
        src["tables"], rows=3, out=tmp_path / "tiny", configs=["wine"], splits=["test"]
    )
    assert datasets.get_dataset_config_names(str(out)) == ["wine"]
    assert list(load(out)) == ["test"]


def test_imagefolder_images_shrink_keeping_aspect_mode_and_labels(src, tmp_path):
    out = tinykit.make_tiny_dataset(src["digits"], rows=20, out=tmp_path / "tiny")
    source = load(src["digits"])["train"]
    tiny = load(out)["train"]
    assert tiny.features == source.features
    originals = {p.name: p for p in (src["digits"] / "train").rglob("*.png")}
    raw = tiny.cast_column("image", datasets.Image(decode=False))
    modes = set()
    for row in raw:
        img = Image.open(io.BytesIO(row["image"]["bytes"]))
        original = Image.open(originals[row["image"]["path"]])
        assert max(img.size) <= 32 and img.format == original.format == "PNG"
        assert img.mode == original.mode
        assert _same_aspect(original.size, img.size), (original.size, img.size)
        modes.add(img.mode)
    assert modes == {"L", "RGB", "RGBA", "P"}


def _same_aspect(big, small):
    """Equal aspect ratios, up to rounding each side to whole pixels."""
    return abs(big[0] / big[1] - small[0] / small[1]) <= (big[0] / big[1]) * (1 / min(small)) + 0.01


def test_image_text_rows_with_and_without_image_and_text(src, tmp_path):
    out = tinykit.make_tiny_dataset(src["image_text"], rows=5, out=tmp_path / "tiny")
    tiny = load(out)["train"]
    assert tiny.features == datasets.Features(
        {"image": datasets.Image(), "text": datasets.Value("string")}
    )
    images = tiny["image"]
    assert any(i is None for i in images) and any(i is not None for i in images)
    assert "" in tiny["text"]
    assert all(max(i.size) <= 32 for i in images if i is not None)


def test_audio_cut_to_one_second_keeping_rate_channels_and_format(src, tmp_path):
    out = tinykit.make_tiny_dataset(src["tones"], rows=8, out=tmp_path / "tiny")
    source = datasets.load_dataset(str(src["tones"]), split="train", streaming=True)
    tiny = load(out)["train"]
    assert tiny.features == source.features
    raw = tiny.cast_column("audio", datasets.Audio(decode=False))
    originals = {
        p.name: sf.info(p) for p in (src["tones"] / "train").iterdir() if p.suffix != ".jsonl"
    }
    assert len(raw) == 8
    for row in raw:
        clip = sf.info(io.BytesIO(row["audio"]["bytes"]))
        original = originals[row["audio"]["path"]]
        assert clip.samplerate == original.samplerate
        assert clip.channels == original.channels
        assert (clip.format, clip.subtype) == (original.format, original.subtype)
        assert clip.frames == min(original.frames, original.samplerate)


def test_csv_and_arrow_files(tmp_path):
    iris = table_dataset("iris")
    flat = iris.map(lambda r: {"sepal": r["measurements"][0]}, remove_columns=["measurements"])
    csv_path = tmp_path / "iris.csv"
    flat.to_csv(str(csv_path), index=False)
    iris.save_to_disk(str(tmp_path / "saved"))
    arrow_path = next((tmp_path / "saved").glob("*.arrow"))

    out = tinykit.make_tiny_dataset(csv_path, rows=5, out=tmp_path / "tiny-csv")
    assert (
        load(out)["train"].features
        == datasets.load_dataset("csv", data_files=str(csv_path))["train"].features
    )
    out = tinykit.make_tiny_dataset(arrow_path, rows=5, out=tmp_path / "tiny-arrow")
    assert load(out)["train"].features == iris.features
    assert set(load(out)["train"]["label"]) == {0, 1, 2}


def test_output_is_byte_reproducible(src, tmp_path):
    first = tinykit.make_tiny_dataset(src["digits"], rows=6, out=tmp_path / "a" / "tiny")
    second = tinykit.make_tiny_dataset(src["digits"], rows=6, out=tmp_path / "b" / "tiny")
    assert files_of(first) == files_of(second)
    card = (first / "README.md").read_text()
    assert f"tinykit make-tiny-dataset {src['digits']} --rows 6 -o tiny" in card


def test_cli_writes_and_reports(src, tmp_path, capsys):
    out = tmp_path / "tiny"
    tables = str(src["tables"])
    argv = ["make-tiny-dataset", tables, "--rows", "2", "--config", "iris", "-o", str(out)]
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["splits"] == {"iris": {"train": 2, "test": 2}}
    assert main(["make-tiny-dataset", tables, "--rows", "3", "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    argv = ["make-tiny-dataset", tables, "--rows", "3", "-o", str(out), "--force"]
    assert main([*argv, "--config", "wine", "iris", "--split", "test"]) == 0
    assert datasets.get_dataset_config_names(str(out)) == ["wine", "iris"]
    assert list(load(out, "iris")) == ["test"] and load(out, "wine")["test"].num_rows == 3


@pytest.mark.parametrize(
    "case, expected",
    [
        (lambda s, t: [str(s["tables"]), "--config", "nope"], "Unknown config 'nope'"),
        (lambda s, t: [str(s["tables"]), "--split", "validation"], "Unknown split 'validation'"),
        (lambda s, t: [str(s["text"]), "--rows", "0"], "rows=0 is not a positive integer"),
        (lambda s, t: [str(_file(t, "data.xyz", b"1,2"))], "Unsupported data file format"),
        (
            lambda s, t: [str(t / "missing.parquet")],
            "is neither an existing file or folder nor a Hub id",
        ),
        (lambda s, t: [str(_broken_images(t))], "Unreadable image"),
    ],
    ids=[
        "unknown-config",
        "unknown-split",
        "zero-rows",
        "unsupported-format",
        "missing-file",
        "unreadable-media",
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(src, tmp_path, capsys, case, expected):
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "outdir" / "tiny"
    out.parent.mkdir()
    code = main(["make-tiny-dataset", *case(src, work), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("tinykit: error: UsageError: ")
    assert expected in err
    assert list(out.parent.iterdir()) == [], "nothing written, no temp folder left"


def _file(folder, name, data):
    (folder / name).write_bytes(data)
    return folder / name


def _broken_images(folder):
    images = folder / "imgs" / "train"
    images.mkdir(parents=True)
    Image.new("RGB", (40, 40), "red").save(images / "ok.png")
    (images / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    return folder / "imgs"


def test_python_api_raises_usage_error(src, tmp_path):
    with pytest.raises(UsageError, match="rows=-1"):
        tinykit.make_tiny_dataset(src["text"], rows=-1, out=tmp_path / "x")
    with pytest.raises(UsageError, match="Unknown split 'dev'.*Available: train"):
        tinykit.make_tiny_dataset(src["text"], splits=["dev"], out=tmp_path / "x")
    with pytest.raises(UsageError, match=r"out=6 is not a folder path.*rows=10"):
        tinykit.make_tiny_dataset(src["text"], 6)  # out is the second argument, sizes keywords
    assert not (tmp_path / "x").exists()
