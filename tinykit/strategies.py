"""Hypothesis strategies for tinykit's inputs: a flat module of well-named functions.

Dataset rows for a `datasets.Features` schema:

    from hypothesis import given
    from tinykit.strategies import dataset_rows

    @given(dataset_rows(features, max_rows=8))
    def test_collator(rows): ...

Values are what `Dataset.from_list(rows, features=features)` accepts: ClassLabel as ints,
Image and Audio as `{"bytes", "path"}` dicts holding real PNG / WAV bytes (tiny: <= 32 px,
<= 0.1 s), missing values as None.
"""

from __future__ import annotations

import io
from typing import Any

from hypothesis import strategies as st

from tinykit.errors import UsageError

# Roughly one value in MISSING_ONE_IN is None, so rows with missing fields show up often
# without drowning the rest.
MISSING_ONE_IN = 8
MAX_TEXT = 64

_INT_BOUNDS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}
_FLOAT_WIDTHS = {"float16": 16, "float32": 32, "float64": 64}


def dataset_rows(
    features: Any, *, min_rows: int = 1, max_rows: int = 20, allow_missing: bool = True
) -> st.SearchStrategy[list[dict]]:
    """Lists of rows (dicts) valid for `features`."""
    return st.lists(
        dataset_row(features, allow_missing=allow_missing), min_size=min_rows, max_size=max_rows
    )


def dataset_row(features: Any, *, allow_missing: bool = True) -> st.SearchStrategy[dict]:
    """One row: a value for every column of `features`."""
    return st.fixed_dictionaries(
        {name: feature_values(f, allow_missing=allow_missing) for name, f in features.items()}
    )


def feature_values(feature: Any, *, allow_missing: bool = True) -> st.SearchStrategy[Any]:
    """Values of one `datasets` feature: Value, ClassLabel, List, dict, Image, Audio, ArrayND."""
    values = _values(feature, allow_missing)
    if not allow_missing:
        return values
    return st.tuples(st.integers(0, MISSING_ONE_IN - 1), values).map(
        lambda pair: None if pair[0] == 0 else pair[1]
    )


def _values(feature: Any, allow_missing: bool) -> st.SearchStrategy[Any]:
    import datasets

    if isinstance(feature, dict):
        return st.fixed_dictionaries(
            {k: feature_values(f, allow_missing=allow_missing) for k, f in feature.items()}
        )
    if isinstance(feature, (datasets.List, datasets.LargeList)):
        length = getattr(feature, "length", -1)
        inner = feature_values(feature.feature, allow_missing=allow_missing)
        if length is not None and length >= 0:
            return st.lists(inner, min_size=length, max_size=length)
        return st.lists(inner, max_size=4)
    if isinstance(feature, datasets.ClassLabel):
        return st.integers(0, feature.num_classes - 1)
    if isinstance(feature, datasets.Value):
        return scalar_values(feature.dtype)
    if isinstance(feature, datasets.Image):
        return png_images()
    if isinstance(feature, datasets.Audio):
        return wav_clips(feature.sampling_rate or 16_000)
    if isinstance(
        feature, (datasets.Array2D, datasets.Array3D, datasets.Array4D, datasets.Array5D)
    ):
        return _nested_lists(feature.shape, scalar_values(feature.dtype))
    raise UsageError(
        f"No strategy for feature type {type(feature).__name__} ({feature!r}). "
        "Use Value, ClassLabel, List, dict, Image, Audio or ArrayND features, "
        "or open an issue for this type."
    )


def scalar_values(dtype: str) -> st.SearchStrategy[Any]:
    """Values of a `datasets.Value` dtype."""
    if dtype in _INT_BOUNDS:
        low, high = _INT_BOUNDS[dtype]
        return st.integers(low, high)
    if dtype in _FLOAT_WIDTHS:
        return st.floats(width=_FLOAT_WIDTHS[dtype], allow_nan=False, allow_infinity=False)
    if dtype == "bool":
        return st.booleans()
    if dtype in ("string", "large_string"):
        return st.text(max_size=MAX_TEXT)
    if dtype in ("binary", "large_binary"):
        return st.binary(max_size=MAX_TEXT)
    if dtype == "null":
        return st.none()
    raise UsageError(
        f"No strategy for Value dtype {dtype!r}. Supported: ints, floats, bool, string, "
        "binary, null. Cast the column to one of these first."
    )


@st.composite
def png_images(draw, max_side: int = 32) -> dict:
    """A `{"bytes", "path"}` Image value: a real PNG of random size, mode and pixels."""
    from PIL import Image

    mode = draw(st.sampled_from(["RGB", "L", "RGBA"]))
    width, height = draw(st.integers(1, max_side)), draw(st.integers(1, max_side))
    channels = len(mode)
    pixels = draw(st.binary(min_size=1, max_size=16))  # a short pattern, tiled
    raw = (pixels * (width * height * channels // len(pixels) + 1))[: width * height * channels]
    buf = io.BytesIO()
    Image.frombytes(mode, (width, height), raw).save(buf, format="PNG")
    return {"bytes": buf.getvalue(), "path": None}


@st.composite
def wav_clips(draw, sampling_rate: int = 16_000, max_seconds: float = 0.1) -> dict:
    """A `{"bytes", "path"}` Audio value: a real 16-bit mono WAV, at most `max_seconds` long."""
    import numpy as np
    import soundfile as sf

    frames = draw(st.integers(1, max(1, int(sampling_rate * max_seconds))))
    amplitude = draw(st.integers(0, 2**15 - 1))
    period = draw(st.integers(2, 200))
    wave = (amplitude * np.sin(2 * np.pi * np.arange(frames) / period)).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, wave, sampling_rate, format="WAV", subtype="PCM_16")
    return {"bytes": buf.getvalue(), "path": None}


def _nested_lists(shape: tuple, leaf: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    if not shape:
        return leaf
    inner = _nested_lists(tuple(shape[1:]), leaf)
    size = shape[0]
    return st.lists(inner, min_size=size or 0, max_size=size if size is not None else 4)
