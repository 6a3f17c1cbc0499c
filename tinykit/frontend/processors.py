"""A model type's processors from transformers' auto tables: its sub-processors (image
processor, video processor, feature extractor) built for a tiny geometry, its multimodal
processor class, and that class assembled around a tokenizer."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tinykit._values import is_int

PARTS = {
    "image_processor": "image",
    "video_processor": "video",
    "feature_extractor": "audio",
    "audio_processor": "audio",
}
"""A processor's sub-processors, by its constructor's argument, and the auto table of each."""


def processors(
    table_name: str, model_type: str, *geometries: dict[str, Any], config: Any = None
) -> Iterator[Any]:
    """The type's processor from transformers' auto table, built for each tiny geometry in turn
    (processors name sizes differently: height/width, a pixel budget, patch and merge sizes).
    Settings the processor and `config` name alike (an audio tower's `max_length` frames,
    `num_mel_bins`) take the tiny config's value first."""
    table = _auto_table(table_name)
    if table is None:  # a backend the table needs is missing: no processor, random inputs
        return
    for cls in _processor_classes(table, model_type):
        built = False
        named = _named_like(cls, config) if config is not None else {}
        for geometry in [*([named] if named else []), *geometries, {}]:
            try:
                processor = cls(**{k: v for k, v in geometry.items() if v is not None})
            except Exception:  # a processor that rejects a tiny setting: try the next one
                continue
            built = True
            yield processor
        if built:  # the first backend that builds (torchvision's, else PIL's) is the type's
            return


AUTO_TABLES = {
    "image": ("image_processing_auto", "IMAGE_PROCESSOR_MAPPING_NAMES"),
    "video": ("video_processing_auto", "VIDEO_PROCESSOR_MAPPING_NAMES"),
    "audio": ("feature_extraction_auto", "FEATURE_EXTRACTOR_MAPPING_NAMES"),
}
"""transformers' auto table of each kind of sub-processor: its module and mapping's name."""


def _auto_table(table_name: str) -> Any:
    """transformers' auto table `table_name` (model_type -> class names); None where a backend
    it needs is missing."""
    import importlib

    # only the table asked for: the video table's module needs torchvision, even to be read
    module, attr = AUTO_TABLES[table_name]
    try:
        return getattr(importlib.import_module(f"transformers.models.auto.{module}"), attr)
    except ImportError:
        return None


def _processor_classes(table: Any, model_type: str) -> list[Any]:
    """The classes `table` names for `model_type` (or a sibling or parent type), torchvision's
    before PIL's, those transformers has."""
    import transformers

    names = (
        table.get(model_type)
        or table.get(_sibling(model_type, table))
        or table.get(_parent(model_type, table))
    )
    if isinstance(names, dict):
        names = [names.get("torchvision"), names.get("pil")]
    classes = [
        getattr(transformers, n, None)
        for n in (names if isinstance(names, list | tuple) else [names])
        if n
    ]
    return [c for c in classes if c is not None]


def _named_like(cls: Any, config: Any) -> dict[str, int]:
    """The processor's integer settings that `config` also names, at the config's value."""
    try:
        accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}
    except (TypeError, ValueError):  # a processor without an inspectable constructor
        return {}
    return {k: getattr(config, k) for k in sorted(accepted) if is_int(getattr(config, k, None))}


def _sibling(model_type: str, table: Any) -> str | None:
    """A type sharing `model_type`'s multimodal processor class that the table lists (GLM-4V-MoE
    uses GLM-4V's processor, and so its image processor)."""
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    mine = PROCESSOR_MAPPING_NAMES.get(model_type)
    shared = (
        t for t, name in PROCESSOR_MAPPING_NAMES.items() if mine and name == mine and t in table
    )
    return next(shared, None) or _composite(model_type, table)


def _composite(model_type: str, table: Any) -> str | None:
    """The composite a tower alone belongs to (`muse_spark` of `muse_spark_audio`, `gemma4` of
    `gemma4_audio`): a listed type whose name prefixes the tower's and whose config holds the
    tower's config class as a sub-config. Its processor is the tower's."""
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        return None
    mine = CONFIG_MAPPING[model_type]
    for other in table:
        if model_type.startswith(f"{other}_") and other in CONFIG_MAPPING:
            subs = getattr(CONFIG_MAPPING[other], "sub_configs", None) or {}
            if mine in subs.values():
                return other
    return None


def _parent(model_type: str, table: Any) -> str | None:
    """The type the table lists whose config holds `model_type` as a sub-config: a vision tower
    alone (Siglip2's, Gemma 4's) is fed by its parent model's image processor."""
    from transformers import CONFIG_MAPPING

    for parent in table:
        try:
            subs = getattr(CONFIG_MAPPING[parent], "sub_configs", None) or {}
        except Exception:  # a table entry without a config class here
            continue
        if any(getattr(c, "model_type", None) == model_type for c in subs.values()):
            return parent
    return None


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


def default_parts(cls: Any, model_type: str) -> dict[str, Any]:
    """Each sub-processor of `cls` at its class defaults (enough to learn the processor's tokens)."""
    parts = {}
    for attribute in cls.get_attributes():
        table = PARTS.get(attribute)
        if table is not None:
            parts[attribute] = next(processors(table, model_type), None)
    return parts


def assemble(cls: Any, tokenizer: Any, parts: dict[str, Any], settings: dict[str, Any]) -> Any:
    """`cls` around `tokenizer` and `parts`; None when a part is missing or it does not build."""
    attributes = cls.get_attributes()
    given = {**parts, "tokenizer": tokenizer}
    if any(given.get(a) is None for a in attributes):
        return None
    try:
        return cls(**{a: given[a] for a in attributes}, **settings)
    except Exception:  # a processor that rejects these settings or parts: the caller moves on
        return None


def placeholders(processor: Any) -> dict[str, str]:
    """The processor's token strings by attribute (`image_token`, `boi_token`, ...)."""
    return {
        name: value
        for name, value in sorted(vars(processor).items())
        if name.endswith("_token") and isinstance(value, str) and value
    }


def load_tokenizer(folder: Path) -> Any | None:
    """The tokenizer in `folder` as transformers loads it alone; None where it does not."""
    from transformers import AutoTokenizer

    if not (folder / "tokenizer_config.json").is_file():
        return None
    try:
        return AutoTokenizer.from_pretrained(folder)
    except Exception:  # a tokenizer transformers does not load alone: no processor around it
        return None
