"""Hypothesis strategies for tinykit's inputs: a flat module of well-named functions.

Dataset rows for a `datasets.Features` schema:

    from hypothesis import given
    from tinykit.strategies import dataset_rows

    @given(dataset_rows(features, max_rows=8))
    def test_collator(rows): ...

Values are what `Dataset.from_list(rows, features=features)` accepts: ClassLabel as ints,
Image and Audio as `{"bytes", "path"}` dicts holding real PNG / WAV bytes (tiny: <= 32 px,
<= 0.1 s), missing values as None.

Tiny model configs and shrink specs per model type, and token batches for a tokenizer:

    @given(tiny_configs("qwen3_moe"))
    def test_forward(config): AutoModelForCausalLM.from_config(config)(...)

    @given(token_batches(tokenizer, max_batch=4, max_len=16))
    def test_collate(batch): ...  # input_ids, attention_mask, labels (-100 on padding)

In CI load the profile registered here: ``pytest --hypothesis-profile=tinykit-ci`` (the tinykit
plugin registers it when asked for) or ``settings.load_profile("tinykit-ci")``.
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any, Literal

from hypothesis import HealthCheck, settings
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
_FLOAT_WIDTHS: dict[str, Literal[16, 32, 64]] = {"float16": 16, "float32": 32, "float64": 64}


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


# CI: the same examples on every run (derandomize; failures print a reproduce blob), no flaky
# deadlines on shared runners, a bounded number of examples so model-building tests stay fast.
CI_PROFILE = "tinykit-ci"
settings.register_profile(
    CI_PROFILE,
    max_examples=25,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def shrink_specs(
    draw,
    max_hidden: int = 64,
    max_layers: int = 3,
    min_layers: int = 1,
    min_vocab: int = 512,
    max_vocab: int = 1024,
) -> dict:
    """Spec dicts for ``tinykit.make_tiny``: heads divide hidden, kv heads divide heads.

    Keys: hidden, layers ("auto" or min_layers..max_layers), heads, kv_heads, vocab, seed.
    Hybrid models need ``min_layers`` >= their number of block types (qwen3_next: 2), and the
    tiny tokenizer make_tiny ships needs room for its base alphabet (byte-level BPE: 256 bytes
    plus specials), hence ``min_vocab`` 512.
    """
    heads = draw(st.sampled_from([1, 2, 4]))
    kv_heads = draw(st.sampled_from([k for k in (1, 2, 4) if heads % k == 0]))
    head_dim = draw(st.sampled_from([8, 16]))
    hidden = heads * head_dim * draw(st.integers(1, max(1, max_hidden // (heads * head_dim))))
    return {
        "hidden": hidden,
        "layers": draw(st.one_of(st.just("auto"), st.integers(min_layers, max_layers))),
        "heads": heads,
        "kv_heads": kv_heads,
        "vocab": draw(st.integers(min_vocab, max_vocab)),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


@st.composite
def tiny_configs(draw, model_type: str, max_hidden: int = 64, max_layers: int = 3) -> Any:
    """A validated transformers config of ``model_type`` that builds a tiny working model.

    Draws a spec from ``shrink_specs()`` and shrinks the type's default config with tinykit's own
    rules (``tinykit.model.config.shrink_config`` and recipes/), so every model type that
    ``tinykit make-tiny`` shrinks has tiny configs. Hybrid stacks that need more layers than drawn
    (one per block type) get all their block types. Raises UnsupportedModelError for a type
    transformers does not know.
    """
    from tinykit.errors import ShrinkConstraintError
    from tinykit.model.config import shrink_config
    from tinykit.model.spec import ShrinkSpec

    spec = ShrinkSpec.from_kwargs(
        **draw(shrink_specs(max_hidden=max_hidden, max_layers=max_layers))
    )
    raw = {"model_type": model_type}
    try:
        return shrink_config(raw, spec).config
    except ShrinkConstraintError as e:
        if getattr(e, "field", None) != "layers":
            raise
        return shrink_config(raw, dataclasses.replace(spec, layers="auto")).config


@st.composite
def token_batches(
    draw,
    tokenizer: Any,
    min_batch: int = 1,
    max_batch: int = 4,
    max_len: int = 16,
    as_tensors: bool = False,
) -> dict:
    """A padded batch for ``tokenizer``: input_ids, attention_mask, and labels with -100 on padding.

    Rows have 1..max_len real tokens (ids < len(tokenizer), never the pad id) and are padded on
    ``tokenizer.padding_side`` with its pad id (eos, then 0, when it has none).
    """
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        pad_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    ids = st.integers(0, len(tokenizer) - 1).filter(lambda i: i != pad_id)
    rows = draw(
        st.lists(
            st.lists(ids, min_size=1, max_size=max_len), min_size=min_batch, max_size=max_batch
        )
    )
    width = max(len(r) for r in rows)
    left = getattr(tokenizer, "padding_side", "right") == "left"
    batch: dict[str, list[list[int]]] = {"input_ids": [], "attention_mask": [], "labels": []}
    for row in rows:
        pad = width - len(row)

        def padded(values: list[int], fill: int, pad: int = pad) -> list[int]:
            return [fill] * pad + values if left else values + [fill] * pad

        batch["input_ids"].append(padded(row, pad_id))
        batch["attention_mask"].append(padded([1] * len(row), 0))
        batch["labels"].append(padded(row, -100))
    if as_tensors:
        import torch

        return {k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()}
    return batch
