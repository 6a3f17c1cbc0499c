"""The processor a tiny model ships, fitted to it: make_tiny runs two steps around the model
build, with the front end's pieces (tinykit/frontend/) doing the tokenizer and file work.

1. `add_media_tokens`, before the config is shrunk: the processor's placeholder tokens join the
   tiny tokenizer (frontend/media_tokens.py), and the config's ids of them (`image_token_id`,
   `image_token_index`, ...) are mapped to theirs. The vocab grows by the tokens added.
2. `ship_processor`, after the model is built: the processor assembled from the image processor
   and feature extractor that the input maker feeds the tiny model, the tiny
   tokenizer, and settings named like config keys (`patch_size`, `num_query_tokens`) or counting
   image tokens (TOKEN_COUNTS: what the tiny tower yields per image). It is written only when a
   forward on its output (a text with its placeholder, and an image or audio) runs: that check
   needs the forward, so it lives with the other makers of the forward's inputs.

A source with processor files of its own keeps them, with the geometry set to the tiny tower's
(`copy_processor`). A type without a multimodal processor (a vision or audio model alone), or
whose processor needs a part missing here (video processors need torchvision), ships its image
processor or feature extractor alone, as the input maker feeds it to the model.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinykit._values import is_int
from tinykit.frontend import media_tokens
from tinykit.frontend.processor_files import copy_processor, has_processor_files, save_processor
from tinykit.frontend.processors import (
    PARTS,
    assemble,
    load_tokenizer,
    placeholders,
    processor_class,
)
from tinykit.model.inputs.forward import Forward

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from tinykit.frontend.tokenizer import Shipped
    from tinykit.model.choices import BuildChoices
    from tinykit.model.config import ShrunkConfig
    from tinykit.model.spec import ShrinkSpec
    from tinykit.source import Source

TOKEN_COUNTS = ("image_seq_len", "image_seq_length", "num_image_tokens")
"""Processor settings that count the image tokens a placeholder expands to: set to the features
the tiny vision tower yields per image."""


def add_media_tokens(
    tmp: Path, src: Source, spec: ShrinkSpec, choices: BuildChoices, shipped: Shipped
) -> Shipped:
    """`shipped` with the placeholder tokens of the type's processor added to the tiny tokenizer
    in `tmp`: its vocab grown by them, and the source config's ids of them mapped to theirs.
    Tiny mode only (faithful mode ships the real tokenizer, --exact-vocab a fixed vocab); not
    for a source with processor files of its own or its own code."""
    from tinykit.model.config import load_config
    from tinykit.model.shrink.token_ids import named_id_map

    vocab = shipped.vocab_size
    if spec.mode != "tiny" or choices.exact_vocab or vocab is None:
        return shipped
    if has_processor_files(src.folder) or "auto_map" in src.config:
        return shipped
    grown = media_tokens.add_media_tokens(tmp, src.model_type, vocab, src.name)
    if grown is None:
        return shipped
    vocab_size, ids = grown
    id_map = named_id_map(load_config(src.config).to_dict(), ids, vocab)
    return dataclasses.replace(
        shipped, vocab_size=vocab_size, id_map={**(shipped.id_map or {}), **id_map}
    )


def ship_processor(tmp: Path, src: Source, model: Any, shrunk: ShrunkConfig) -> None:
    """Write the processor files of the tiny `model` into `tmp` (none where no processor fits)."""
    if has_processor_files(src.folder):
        copy_processor(src.folder, shrunk.config, tmp)
        return
    f, parts, pixels = _built_parts(model)
    if not parts:  # a text model, or a tower no processor fits: nothing to ship
        return
    cls = processor_class(src.model_type)
    tokenizer = load_tokenizer(tmp) if cls is not None else None
    subs = _sub_processors(cls, parts) if cls is not None and tokenizer is not None else None
    if subs is not None:  # every part built here: the processor, or nothing
        processor = _fitted(cls, tokenizer, subs, f, pixels)
        if processor is not None:
            save_processor(processor, tmp)
        return
    alone = next(iter(parts.values()), None)
    if alone is not None:
        save_processor(alone, tmp)


def _built_parts(model: Any) -> tuple[Forward, dict[str, Any], dict[str, Any]]:
    """The tiny model's forward, the sub-processors built for it keyed by PARTS' tables, and
    the pixels its image processor makes (none without one)."""
    import torch

    from tinykit.model.inputs.audio import audio_extractor
    from tinykit.model.inputs.image import (
        image_processor,
        reads_images,
        reads_video,
        video_processor,
    )

    f = Forward.of(model, 1, 8, torch.Generator().manual_seed(0))
    video = video_processor(f) if reads_video(f) else None
    image = image_processor(f) if not video and reads_images(f) else None
    audio = audio_extractor(f)  # (None, at once, for a forward that reads no audio)
    found = {"video": video, "image": image, "audio": audio}
    parts = {table: made[0] for table, made in found.items() if made is not None}
    return f, parts, image[1] if image else {}


def _sub_processors(cls: Any, parts: dict[str, Any]) -> dict[str, Any] | None:
    """The processor class's sub-processors by attribute, or None where one is not built here."""
    wanted = {a: PARTS.get(a) for a in cls.get_attributes() if a != "tokenizer"}
    subs = {a: parts.get(table or "") for a, table in wanted.items()}
    return subs if all(subs.values()) else None


def _fitted(
    cls: Any, tokenizer: Any, subs: dict[str, Any], f: Forward, pixels: dict[str, Any]
) -> Any | None:
    """The processor whose output runs the tiny model. Settings are tried as `_settings` gives
    them; where the image tokens still fall short of the features (or exceed them), each integer
    setting in turn is moved by the difference (LLaVA's `num_additional_image_tokens`)."""
    for settings in _settings(cls, f, subs, pixels):
        processor = assemble(cls, tokenizer, subs, settings)
        if processor is None:
            continue
        short = _shortfall(processor, f)
        if short is None:
            return processor
        for name in _int_settings(cls, processor) if short else ():
            moved = {**settings, name: getattr(processor, name) + short}
            shifted = assemble(cls, tokenizer, subs, moved)
            if shifted is not None and _shortfall(shifted, f) is None:
                return shifted
    return None


def _settings(
    cls: Any, f: Forward, subs: dict[str, Any], pixels: dict[str, Any]
) -> list[dict[str, Any]]:
    """Constructor settings to try, most tiny-specific first: those the config names alike
    (the model's own, else a sub-config's), plus TOKEN_COUNTS at the tiny tower's count; then
    the class defaults. A sub-processor that leaves a TOKEN_COUNTS attribute unset for its
    processor to read (PaliGemma's image processor) gets the count too."""
    params = inspect.signature(cls.__init__).parameters
    named = _named_alike(params, [f.config, f.vision, *_sub_configs(f.config)])
    counts = {}
    per_image = _per_image(f, pixels)
    if per_image is not None:
        counts = {n: per_image for n in TOKEN_COUNTS if n in params}
        _fill_token_counts(subs.values(), per_image)
    tries = [{**named, **counts}, named, {}]
    return [t for i, t in enumerate(tries) if t not in tries[:i]]


def _named_alike(params: Mapping[str, inspect.Parameter], nodes: list[Any]) -> dict[str, Any]:
    """The constructor's settings that a config node names alike, at the first node's value."""
    named: dict[str, Any] = {}
    for name, param in params.items():
        values = (getattr(node, name, None) for node in nodes)
        value = next((v for v in values if _fits(param, v)), None)
        if value is not None:
            named[name] = value
    return named


def _fits(param: inspect.Parameter, value: Any) -> bool:
    """Whether a config's `value` may stand for the constructor's `param`: a plain number or
    string, where the default is unset or of the same type."""
    default = param.default
    return type(value) in (int, float, str) and (
        default in (None, param.empty) or type(default) is type(value)
    )


def _fill_token_counts(subs: Iterable[Any], per_image: int) -> None:
    """Set the TOKEN_COUNTS attributes the sub-processors leave unset to the tiny tower's count."""
    for sub in subs:
        for name in TOKEN_COUNTS:
            if hasattr(sub, name) and getattr(sub, name) is None:
                setattr(sub, name, per_image)


def _per_image(f: Forward, pixels: dict[str, Any]) -> int | None:
    """Features the tiny vision tower yields per image of the input maker's pixels."""
    from tinykit.model.inputs.placement import image_feature_count, image_features_getter

    if not pixels or image_features_getter(f.model) is None:
        return None
    try:
        return image_feature_count(f.model, pixels) // f.batch
    except Exception:  # a tower whose features are not counted here: the defaults
        return None


def _sub_configs(config: Any) -> list[Any]:
    from transformers import PretrainedConfig

    return [v for v in vars(config).values() if isinstance(v, PretrainedConfig)]


def _shortfall(processor: Any, f: Forward) -> int | None:
    """None when a forward on the processor's output runs: an image or audio for each part it
    has, with a text holding a placeholder (each of its token strings in turn, or none), or alone
    (ColPali's takes one or the other); images also as one sample's list (Idefics2's). Else how
    many image tokens per image it falls short of the tower's features (0: unknown)."""
    from tinykit.model.inputs import Inputs
    from tinykit.model.inputs.forward import runs

    made: dict[str, Any] = {}
    short = 0
    for given in _processor_calls(processor, _sample_media(processor, f)):
        try:
            out = processor(**given, return_tensors="pt")
        except Exception:  # this text or layout does not suit the processor: the next one
            continue
        inputs = {k: v for k, v in out.items() if k in f.params}
        if runs(f.model, Inputs(_completed(f, inputs, made)).to("cpu", f.model.dtype).forward):
            return None
        short = short or _image_token_shortfall(processor, f, inputs)
    return short


def _sample_media(processor: Any, f: Forward) -> dict[str, Any]:
    """One image and one second of audio, for each of the parts the processor has."""
    import numpy as np

    from tinykit.model.inputs.image import image_side

    rng = np.random.default_rng(0)
    media: dict[str, Any] = {}
    if getattr(processor, "image_processor", None) is not None:
        from PIL import Image  # every processor takes these (Idefics2's nothing else)

        side = image_side(f.vision) or 32
        pixels = rng.integers(0, 256, (2 * side, side, 3), dtype=np.uint8)
        media["images"] = [Image.fromarray(pixels)]
    extractor = getattr(processor, "feature_extractor", None) or getattr(
        processor, "audio_processor", None
    )
    if extractor is not None:
        rate = getattr(extractor, "sampling_rate", 16_000)
        media["audio"] = [rng.standard_normal(rate).astype(np.float32)]
    return media


def _processor_calls(processor: Any, media: dict[str, Any]) -> list[dict[str, Any]]:
    """The processor's arguments to try: each text (one per placeholder, or none) with each
    media layout (images flat, then as one sample's list)."""
    layouts = [media, *([{**media, "images": [media["images"]]}] if "images" in media else [])]
    tokens = dict.fromkeys(["", *placeholders(processor).values()])
    texts = [*({"text": [f"{p} a tiny test"]} for p in tokens), {}]  # {}: media alone
    return [{**t, **m} for m in layouts for t in texts]


def _completed(f: Forward, inputs: dict[str, Any], made: dict[str, Any]) -> dict[str, Any]:
    """The processor's `inputs` plus what the forward requires beside, and a decoder's ids where
    no labels shift into them, taken from the input maker (its output kept in `made`)."""
    decoder = "labels" not in inputs
    wanted = {n for n in f.params if n in f.required or (decoder and n.startswith("decoder_"))}
    if wanted - set(inputs) and not made:
        from tinykit.model.inputs import make_inputs

        made.update(make_inputs(f.model, batch=1, seq=8).forward)
    missing = {k: v for k, v in made.items() if k in wanted and k not in inputs}
    return {**inputs, **missing}


def _image_token_shortfall(processor: Any, f: Forward, inputs: dict[str, Any]) -> int:
    """The tower's features minus the processor's image tokens, per image (0: not counted)."""
    from tinykit.model.inputs.placement import image_feature_count

    token = getattr(processor, "image_token_id", None)
    ids = inputs.get("input_ids")
    if not is_int(token) or ids is None or "pixel_values" not in inputs:
        return 0
    try:
        features = image_feature_count(f.model, inputs)
    except Exception:  # features this tower does not yield on these pixels: not counted
        return 0
    return features - int((ids == token).sum())


def _int_settings(cls: Any, processor: Any) -> list[str]:
    """The constructor's integer settings, as the built processor holds them."""
    params = inspect.signature(cls.__init__).parameters
    return [n for n in params if is_int(getattr(processor, n, None))]
