"""Row picking and media shrinking, as properties over generated inputs."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf
from datasets import ClassLabel, Features, Image, List, Value
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image as PILImage

from tinykit.dataset.media import shrink_audio, shrink_image, shrink_row
from tinykit.dataset.select import pick_rows
from tinykit.errors import UsageError
from tinykit.strategies import dataset_rows

TEXT_LABEL = Features({"text": Value("string"), "label": ClassLabel(names=list("abcd"))})


@settings(max_examples=60, deadline=None)
@given(rows=dataset_rows(TEXT_LABEL, min_rows=1, max_rows=40), n=st.integers(1, 50))
def test_picks_are_distinct_sorted_deterministic_and_keep_the_extremes(rows, n):
    picks = pick_rows(rows, TEXT_LABEL, n)
    assert picks == sorted(set(picks)) and len(picks) == min(n, len(rows))
    assert picks == pick_rows(rows, TEXT_LABEL, n)
    size = [len(r["text"] or "") + 1 for r in rows]
    if n >= 2:
        assert min(size) in {size[i] for i in picks}
        assert max(size) in {size[i] for i in picks}


@settings(max_examples=60, deadline=None)
@given(rows=dataset_rows(TEXT_LABEL, min_rows=1, max_rows=40))
def test_every_label_present_survives_when_rows_allow(rows):
    labels = {r["label"] for r in rows}
    n = len(labels) + 4  # room for the extremes, the gaps and the typical row, then labels
    picks = pick_rows(rows, TEXT_LABEL, n)
    assert {rows[i]["label"] for i in picks} == labels


def test_picks_rows_with_and_without_media_and_with_holes():
    features = Features({"image": Image(), "tags": List(Value("string"))})
    png = {"bytes": _png(8, 8, "RGB"), "path": "x.png"}
    rows = [{"image": png, "tags": ["a", "b"]} for _ in range(50)]
    rows[17] = {"image": None, "tags": ["c"]}
    rows[31] = {"image": png, "tags": []}
    rows[40] = {"image": png, "tags": [None]}
    picks = pick_rows(rows, features, 4)
    # 17: no image (and a missing value); 31: an empty list; plus the longest, with an image
    assert {17, 31} <= set(picks) and rows[picks[0]]["image"] is not None
    rows[17] = rows[0]  # now the only missing value is inside row 40's list
    assert {31, 40} <= set(pick_rows(rows, features, 4))


def _png(width, height, mode, fmt="PNG"):
    buf = io.BytesIO()
    img = PILImage.new(
        mode if mode != "P" else "RGB",
        (width, height),
        (10, 200, 30)[: len(mode)] if mode != "P" else (9, 9, 9),
    )
    (img.quantize(4) if mode == "P" else img).save(buf, format=fmt)
    return buf.getvalue()


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(1, 300),
    height=st.integers(1, 300),
    mode_fmt=st.sampled_from(
        [
            ("RGB", "PNG"),
            ("L", "PNG"),
            ("RGBA", "PNG"),
            ("P", "PNG"),
            ("RGB", "JPEG"),
            ("L", "JPEG"),
        ]
    ),
)
def test_images_end_up_at_most_32px_keeping_aspect_mode_and_format(width, height, mode_fmt):
    mode, fmt = mode_fmt
    data = _png(width, height, mode, fmt)
    small = PILImage.open(io.BytesIO(shrink_image(data)))
    assert max(small.size) <= 32
    assert (small.mode, small.format) == (mode, fmt)
    if max(width, height) <= 32:
        assert small.size == (width, height), "small images are kept as they are"
    else:
        assert max(small.size) == 32
        scale = 32 / max(width, height)  # each side is the scaled side, rounded, at least 1 px
        for side, original in zip(small.size, (width, height), strict=True):
            assert abs(side - max(1, original * scale)) <= 1


@pytest.mark.parametrize("fmt, subtype", [("WAV", "PCM_16"), ("FLAC", "PCM_16"), ("WAV", "FLOAT")])
@pytest.mark.parametrize("seconds, channels", [(0.5, 1), (2.5, 2)])
def test_audio_at_most_one_second_keeping_rate_channels_and_format(fmt, subtype, seconds, channels):
    rate = 8000
    wave = np.sin(np.arange(int(rate * seconds)) / 7.0) * 0.5
    buf = io.BytesIO()
    sf.write(buf, np.stack([wave] * channels, axis=1), rate, format=fmt, subtype=subtype)
    cut = shrink_audio(buf.getvalue())
    info = sf.info(io.BytesIO(cut))
    assert (info.samplerate, info.channels, info.format, info.subtype) == (
        rate,
        channels,
        fmt,
        subtype,
    )
    assert info.frames == min(len(wave), rate)
    head, _ = sf.read(io.BytesIO(cut), always_2d=True)
    full, _ = sf.read(io.BytesIO(buf.getvalue()), always_2d=True, frames=info.frames)
    np.testing.assert_array_equal(head, full)  # the first second, sample for sample


def test_nested_media_are_shrunk_and_paths_lose_their_folders():
    features = Features(
        {"pages": List(Image()), "meta": {"cover": Image(), "title": Value("string")}}
    )
    big = {"bytes": _png(100, 50, "RGB"), "path": "/home/someone/data/p1.png"}
    row = shrink_row({"pages": [big, None], "meta": {"cover": big, "title": "t"}}, features)
    for value in (row["pages"][0], row["meta"]["cover"]):
        assert PILImage.open(io.BytesIO(value["bytes"])).size == (32, 16)
        assert value["path"] == "p1.png"
    assert row["pages"][1] is None and row["meta"]["title"] == "t"


def test_unreadable_media_is_a_usage_error():
    with pytest.raises(UsageError, match="Unreadable image in cover"):
        shrink_image(b"GIF89a truncated", "cover")
    with pytest.raises(UsageError, match="Unreadable audio"):
        shrink_audio(b"RIFF\x00\x00\x00\x00WAVE")
