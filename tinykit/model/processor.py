"""The processor files a tiny model ships: its type's processor from transformers' auto tables,
at the tiny geometry, around the tiny tokenizer, checked on the tiny model.

make_tiny runs two steps around the model build:

1. `add_media_tokens`, before the config is shrunk: the processor's placeholder tokens (`<image>`,
   and those it adds itself, such as Idefics3's `<fake_token_around_image>`) become special
   tokens of the tiny tokenizer, and the config's ids of them (`image_token_id`,
   `image_token_index`, ...) are mapped to theirs. The vocab grows by the tokens added.
2. `ship_processor`, after the model is built: the processor assembled from the image processor
   and feature extractor that the input maker feeds the tiny model (model/inputs/), the tiny
   tokenizer, and settings named like config keys (`patch_size`, `num_query_tokens`) or counting
   image tokens (TOKEN_COUNTS: what the tiny tower yields per image). It is written only when a
   forward on its output (a text with its placeholder, and an image or audio) runs.

A source with processor files of its own keeps them, with the geometry set to the tiny tower's
(`copy_processor`). A type without a multimodal processor (a vision or audio model alone), or
whose processor needs a part missing here (video processors need torchvision), ships its image
processor or feature extractor alone, as the input maker feeds it to the model.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinykit.errors import TinyArtifactInvalid
from tinykit.model.inputs.forward import Forward, is_int
from tinykit.model.tokenizer import PROCESSOR_FILES

if TYPE_CHECKING:
    from tinykit.model.choices import BuildChoices
    from tinykit.model.config import ShrunkConfig
    from tinykit.model.spec import ShrinkSpec
    from tinykit.model.tokenizer import Shipped
    from tinykit.source import Source

PARTS = {
    "image_processor": "image",
    "video_processor": "video",
    "feature_extractor": "audio",
    "audio_processor": "audio",
}
"""A processor's sub-processors, by its constructor's argument, and the auto table of each."""

TOKEN_COUNTS = ("image_seq_len", "image_seq_length", "num_image_tokens")
"""Processor settings that count the image tokens a placeholder expands to: set to the features
the tiny vision tower yields per image."""


AUTO_CLASSES = ("AutoProcessor", "AutoImageProcessor", "AutoFeatureExtractor", "AutoVideoProcessor")
"""transformers' loaders of processor files, the whole processor first."""


def processor_class(model_type: str) -> Any | None:
    """The type's multimodal processor class (transformers' PROCESSOR_MAPPING_NAMES), None where
    it has none or the class needs a backend missing here."""
    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    name = PROCESSOR_MAPPING_NAMES.get(model_type)
    try:
        cls = getattr(transformers, name) if name else None
        return cls if cls is not None and cls.get_attributes() else None
    except (AttributeError, ImportError):  # a class of a backend not installed (torchvision)
        return None


def add_media_tokens(
    tmp: Path, src: Source, spec: ShrinkSpec, choices: BuildChoices, shipped: Shipped
) -> Shipped:
    """`shipped` with the placeholder tokens of the type's processor added to the tiny tokenizer
    in `tmp`: its vocab grown by them, and the source config's ids of them mapped to theirs.
    Tiny mode only (faithful mode ships the real tokenizer, --exact-vocab a fixed vocab)."""
    if spec.mode != "tiny" or choices.exact_vocab or shipped.vocab_size is None:
        return shipped
    grown = _media_tokens(tmp, src, shipped.vocab_size)
    if grown is None:
        return shipped
    vocab_size, id_map = grown
    return dataclasses.replace(
        shipped, vocab_size=vocab_size, id_map={**(shipped.id_map or {}), **id_map}
    )


def _media_tokens(tmp: Path, src: Source, vocab_size: int) -> tuple[int, dict[int, int]] | None:
    """The tokenizer's new length and the config ids' map; None: nothing added."""
    if _has_own_files(src) or "auto_map" in src.config:
        return None
    cls = processor_class(src.model_type)
    if cls is None or "tokenizer" not in cls.get_attributes():
        return None
    parts = _default_parts(cls, src.model_type)
    processor, tokenizer, before = _built_with_named_tokens(cls, tmp, parts)
    if tokenizer is None:  # no tokenizer transformers loads alone: no processor around it
        return None
    new: list[str] = []
    if processor is not None:  # its tokens, and those it added to its tokenizer as it built
        added = sorted((i, t) for t, i in tokenizer.get_added_vocab().items() if i >= before)
        missing = [t for t in _placeholders(processor).values() if not _is_token(tokenizer, t)]
        new = list(dict.fromkeys([*(t for _, t in added), *missing]))
        _add_special_tokens(tmp, new)
    if not new and before == vocab_size:  # nothing added, by name or otherwise
        return None
    grown = _tokenizer(tmp)
    if grown is None:
        raise TinyArtifactInvalid(
            f"the tiny tokenizer of {src.name} does not load once the tokens of its processor "
            "are added. This is a tinykit bug: report it with the source."
        )
    if len(grown) == vocab_size:
        return None
    # the processor's own ids as it computes them from the grown tokenizer's files
    rebuilt = _assemble(cls, grown, parts, {}) or processor
    ids = _token_ids(rebuilt, grown) if rebuilt is not None else {}
    return len(grown), _config_ids(src, ids, vocab_size)


NAMED_TOKEN = re.compile(r"\w+ has no attribute (\w+_token)(?:_id)?")
"""transformers' error for a named token a tokenizer lacks (`tokenizer.boi_token`)."""


def _built_with_named_tokens(cls: Any, folder: Path, parts: dict[str, Any]) -> tuple[Any, Any, int]:
    """`cls` built around the tokenizer in `folder` (None: it does not build), that tokenizer
    (None: it does not load) and its length then. A processor that reads a named token of its tokenizer this one lacks
    (Gemma 3's `tokenizer.boi_token`, DeepSeek-VL's `image_token`) gets it first: `<boi>`, a
    special token named in tokenizer_config.json, as the real repos' tokenizers name theirs."""
    named: set[str] = set()
    while True:
        tokenizer = _tokenizer(folder)
        if tokenizer is None:
            return None, None, 0
        before = len(tokenizer)
        try:
            return cls(**{**parts, "tokenizer": tokenizer}), tokenizer, before
        except AttributeError as e:
            match = NAMED_TOKEN.fullmatch(str(e))
            if match is None or match[1] in named:
                return None, tokenizer, before
            named.add(match[1])
            _add_special_tokens(folder, [f"<{match[1].removesuffix('_token')}>"], match[1])
        except Exception:  # a processor that does not build here: no tokens to learn
            return None, tokenizer, before


def ship_processor(tmp: Path, src: Source, model: Any, shrunk: ShrunkConfig) -> None:
    """Write the processor files of the tiny `model` into `tmp` (none where no processor fits)."""
    if _has_own_files(src):
        copy_processor(src.folder, shrunk.config, tmp)  # type: ignore[arg-type]
        return
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
    if not parts:  # a text model, or a tower no processor fits: nothing to ship
        return
    cls = processor_class(src.model_type)
    tokenizer = _tokenizer(tmp) if cls is not None else None
    if cls is not None and tokenizer is not None:
        wanted = {a: PARTS.get(a) for a in cls.get_attributes() if a != "tokenizer"}
        subs = {a: parts.get(table or "") for a, table in wanted.items()}
        if all(subs.values()):  # every part built here: the processor, or nothing
            processor = _fitted(cls, tokenizer, subs, f, image[1] if image else {})
            if processor is not None:
                _save(processor, tmp)
            return
    alone = next(iter(parts.values()), None)
    if alone is not None:
        _save(alone, tmp)


def _fitted(
    cls: Any, tokenizer: Any, subs: dict[str, Any], f: Forward, pixels: dict[str, Any]
) -> Any | None:
    """The processor whose output runs the tiny model. Settings are tried as `_settings` gives
    them; where the image tokens still fall short of the features (or exceed them), each integer
    setting in turn is moved by the difference (LLaVA's `num_additional_image_tokens`)."""
    for settings in _settings(cls, f, subs, pixels):
        processor = _assemble(cls, tokenizer, subs, settings)
        if processor is None:
            continue
        short = _shortfall(processor, f)
        if short is None:
            return processor
        for name in _int_settings(cls, processor) if short else ():
            moved = {**settings, name: getattr(processor, name) + short}
            shifted = _assemble(cls, tokenizer, subs, moved)
            if shifted is not None and _shortfall(shifted, f) is None:
                return shifted
    return None


def shipped_processor(folder: Path) -> str:
    """What loads the processor files in `folder`: the first of AUTO_CLASSES that gives a
    processor (not the tokenizer alone), as 'AutoProcessor: Idefics3Processor'; '' where the
    folder has no processor files; 'fails: <error>' where none loads them."""
    import transformers
    from transformers import PreTrainedTokenizerBase

    if not any((folder / n).is_file() for n in PROCESSOR_FILES):
        return ""
    error = ""
    for name in AUTO_CLASSES:
        try:
            loaded = getattr(transformers, name).from_pretrained(folder)
        except Exception as e:  # this loader does not take these files: the next one
            error = error or f"{name}: {type(e).__name__}: {' '.join(str(e).split())[:120]}"
            continue
        if not isinstance(loaded, PreTrainedTokenizerBase):
            return f"{name}: {type(loaded).__name__}"
    return f"fails: {error}"


def _has_own_files(src: Source) -> bool:
    return src.folder is not None and any((src.folder / n).is_file() for n in PROCESSOR_FILES)


def _tokenizer(folder: Path) -> Any | None:
    from transformers import AutoTokenizer

    if not (folder / "tokenizer_config.json").is_file():
        return None
    try:
        return AutoTokenizer.from_pretrained(folder)
    except Exception:  # a tokenizer transformers does not load alone: no processor around it
        return None


def _default_parts(cls: Any, model_type: str) -> dict[str, Any]:
    """Each sub-processor of `cls` at its class defaults (enough to learn the processor's tokens)."""
    from tinykit.model.inputs.processors import processors

    parts = {}
    for attribute in cls.get_attributes():
        table = PARTS.get(attribute)
        if table is not None:
            parts[attribute] = next(processors(table, model_type), None)
    return parts


def _assemble(cls: Any, tokenizer: Any, parts: dict[str, Any], settings: dict[str, Any]) -> Any:
    """`cls` around `tokenizer` and `parts`; None when a part is missing or it does not build."""
    attributes = cls.get_attributes()
    given = {**parts, "tokenizer": tokenizer}
    if any(given.get(a) is None for a in attributes):
        return None
    try:
        return cls(**{a: given[a] for a in attributes}, **settings)
    except Exception:  # a processor that rejects these settings or parts: the caller moves on
        return None


def _placeholders(processor: Any) -> dict[str, str]:
    """The processor's token strings by attribute (`image_token`, `boi_token`, ...)."""
    return {
        name: value
        for name, value in sorted(vars(processor).items())
        if name.endswith("_token") and isinstance(value, str) and value
    }


def _token_ids(processor: Any, tokenizer: Any) -> dict[str, int]:
    """The processor's token ids by name (`image_token` -> its id): its token strings', the ids
    it holds itself over those (`image_token_id`: Aya Vision's is its patch token's), and the
    tokenizer's named tokens over both (Gemma 3's processor holds its `boi_token` as image token,
    its tokenizer's `image_token` is the one the model reads)."""
    from transformers import PreTrainedTokenizerBase

    ids = {n: tokenizer.convert_tokens_to_ids(t) for n, t in _placeholders(processor).items()}
    for name, value in vars(processor).items():
        if name.endswith("_token_id") and is_int(value):
            ids[name.removesuffix("_id")] = value
    standard = set(PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES)
    for name in tokenizer.SPECIAL_TOKENS_ATTRIBUTES:
        if name not in standard:
            ids[name] = getattr(tokenizer, f"{name}_id", None)
    return {n: i for n, i in ids.items() if is_int(i)}


def _is_token(tokenizer: Any, token: str) -> bool:
    found = tokenizer.convert_tokens_to_ids(token)
    return is_int(found) and tokenizer.convert_ids_to_tokens(found) == token


def _add_special_tokens(folder: Path, tokens: list[str], name: str | None = None) -> None:
    """Append `tokens` to the tokenizer files in `folder` as special tokens; `name` names the
    one token in tokenizer_config.json (transformers then reads `tokenizer.<name>`)."""
    from tokenizers import AddedToken, Tokenizer

    if not tokens:
        return
    path = folder / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in tokens])
    tokenizer.save(str(path), pretty=False)
    ids = {t: tokenizer.token_to_id(t) for t in tokens}
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text("utf-8"))
    if name is not None:
        config[name] = tokens[0]
    decoder = config.setdefault("added_tokens_decoder", {})
    for token, i in ids.items():
        decoder[str(i)] = {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
    text = json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    config_path.write_text(text, "utf-8")


def _config_ids(src: Source, tiny: dict[str, int], vocab_size: int) -> dict[int, int]:
    """Source config id -> tiny id of each processor token the config names (`image_token` ->
    `image_token_id` or `image_token_index`, in any sub-config). The config's other ids past the
    vocab keep the places the shrink gives them without the added tokens."""
    from tinykit.model.config import load_config
    from tinykit.model.shrink.token_ids import is_token_key

    config = load_config(src.config).to_dict()
    mapping: dict[int, int] = {}
    high: set[int] = set()

    def walk(node: dict[str, Any]) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value)
            elif isinstance(key, str) and is_int(value) and is_token_key(key):
                name = key.removesuffix("_id").removesuffix("_index")
                if name in tiny:
                    mapping[value] = tiny[name]
                elif value >= vocab_size:
                    high.add(value)

    walk(config)
    rest = sorted(high - set(mapping))
    mapping.update({old: vocab_size - len(rest) + rank for rank, old in enumerate(rest)})
    return mapping


def _settings(
    cls: Any, f: Forward, subs: dict[str, Any], pixels: dict[str, Any]
) -> list[dict[str, Any]]:
    """Constructor settings to try, most tiny-specific first: those the config names alike
    (the model's own, else a sub-config's), plus TOKEN_COUNTS at the tiny tower's count; then
    the class defaults. A sub-processor that leaves a TOKEN_COUNTS attribute unset for its
    processor to read (PaliGemma's image processor) gets the count too."""
    params = inspect.signature(cls.__init__).parameters
    nodes = [f.config, f.vision, *_sub_configs(f.config)]
    named: dict[str, Any] = {}
    for name, param in params.items():
        default = param.default
        for node in nodes:
            value = getattr(node, name, None)
            if type(value) in (int, float, str) and (
                default in (None, param.empty) or type(default) is type(value)
            ):
                named[name] = value
                break
    counts = {}
    per_image = _per_image(f, pixels)
    if per_image is not None:
        counts = {n: per_image for n in TOKEN_COUNTS if n in params}
        for sub in subs.values():
            for name in TOKEN_COUNTS:
                if hasattr(sub, name) and getattr(sub, name) is None:
                    setattr(sub, name, per_image)
    tries = [{**named, **counts}, named, {}]
    return [t for i, t in enumerate(tries) if t not in tries[:i]]


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
    import numpy as np

    from tinykit.model.inputs import Inputs, make_inputs
    from tinykit.model.inputs.forward import runs
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
    layouts = [media, *([{**media, "images": [media["images"]]}] if "images" in media else [])]
    placeholders = dict.fromkeys(["", *_placeholders(processor).values()])
    texts = [*({"text": [f"{p} a tiny test"]} for p in placeholders), {}]  # {}: media alone
    made: dict[str, Any] = {}
    short = 0
    for given in [{**t, **m} for m in layouts for t in texts]:
        try:
            out = processor(**given, return_tensors="pt")
        except Exception:  # this text or layout does not suit the processor: the next one
            continue
        inputs = {k: v for k, v in out.items() if k in f.params}
        # what the forward requires beside, and a decoder's ids where no labels shift into them
        decoder = "labels" not in inputs
        wanted = {n for n in f.params if n in f.required or (decoder and n.startswith("decoder_"))}
        if wanted - set(inputs) and not made:
            made = make_inputs(f.model, batch=1, seq=8).forward
        missing = {k: v for k, v in made.items() if k in wanted and k not in inputs}
        if runs(f.model, Inputs({**inputs, **missing}).to("cpu", f.model.dtype).forward):
            return None
        short = short or _image_token_shortfall(processor, f, inputs)
    return short


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


def _save(processor: Any, tmp: Path) -> None:
    """The processor's own files (not its tokenizer's: those are shipped already) into `tmp`."""
    with tempfile.TemporaryDirectory(prefix="tinykit-processor-") as scratch:
        processor.save_pretrained(scratch)
        for name in PROCESSOR_FILES:
            path = Path(scratch) / name
            if path.is_file():
                (tmp / name).write_bytes(path.read_bytes())


def copy_processor(folder: Path, config: Any, tmp: Path) -> None:
    """Copy a source's image/video processor files, with their image geometry set to the tiny
    vision tower's and a Whisper-style audio window to the tiny encoder's."""
    from tinykit.model.inputs.audio import fit_audio_window

    vision = getattr(config, "vision_config", None) or config
    size, patch = getattr(vision, "image_size", None), getattr(vision, "patch_size", None)
    for name in PROCESSOR_FILES:
        path = folder / name
        if not path.is_file():
            continue
        data = json.loads(path.read_text())
        if isinstance(size, int):
            for key in ("size", "crop_size"):
                if isinstance(data.get(key), dict):
                    data[key] = {k: size for k in data[key]}
                elif isinstance(data.get(key), int):
                    data[key] = size
        if (
            isinstance(patch, int)
            and isinstance(data.get("patch_size"), int)
            and isinstance(size, int)
        ):
            data["patch_size"] = patch
        fit_audio_window(data, config)
        (tmp / name).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
