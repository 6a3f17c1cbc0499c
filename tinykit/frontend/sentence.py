"""The sentence-transformers front end of a tiny model: `modules.json` and its module folders.

A sentence-transformers repo is a transformers model at its root plus a pipeline of modules
listed in `modules.json` (the Transformer at "", then `1_Pooling/`, `2_Dense/`, `3_Normalize/`
...), `sentence_bert_config.json` (the Transformer's max_seq_length) and
`config_sentence_transformers.json`. A stand-in keeps the source's pipeline, with one rule for
every module, whatever its type:

- every dimension in a module's config (a key ending in `_dimension`, `_features` or `_dim`)
  becomes the tiny model's hidden size, so each module takes what the one before it gives;
- a module whose type stores weights (`MODULE_WEIGHTS`) gets random ones of those shapes;
- `max_seq_length` is clamped to the tiny model's positions.

A source without `modules.json` gets the pipeline sentence-transformers itself makes for a
plain model (Transformer + Pooling) when `pooling` names the mode, in the classic layout the
Hub's repos use (sentence-transformers 2 to 6 all load it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinykit.errors import UsageError

FRONT_END_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len")
_DIMENSION_SUFFIXES = ("_dimension", "_features", "_dim")


def _dense_weights(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {
        "linear.weight": (config["out_features"], config["in_features"])
    }
    if config.get("bias", True):
        shapes["linear.bias"] = (config["out_features"],)
    return shapes


# module type (the last part of its dotted name) -> the weight shapes its config implies
MODULE_WEIGHTS: dict[str, Callable[[dict[str, Any]], dict[str, tuple[int, ...]]]] = {
    "Dense": _dense_weights,
}


def check_pooling(pooling: Any) -> None:
    if pooling is not None and pooling not in POOLING_MODES:
        raise UsageError(
            f"pooling={pooling!r} is not a sentence-transformers pooling mode. Pass one of "
            f"{', '.join(POOLING_MODES)}."
        )


def write_front_end(
    out: Path, source: Path | None, config: Any, *, pooling: str | None, seed: int
) -> list[str]:
    """Write the sentence-transformers files of `source` (a folder, or None) into `out`, fitted
    to the tiny `config`; with no `modules.json` there, the default pipeline when `pooling` is
    set. Returns the module folders written ([] when there is no front end)."""
    check_pooling(pooling)
    modules = _modules(out, source, config, pooling)
    if modules is None:
        return []
    hidden, positions = _sizes(config)
    if source is not None:
        _copy_settings(out, source, positions)
    _write_json(out / "modules.json", modules)
    folders = []
    for module in modules:
        folder = str(module.get("path") or "")
        if not folder:  # the Transformer itself: the model at the root
            continue
        folders.append(folder)
        _write_module(out / folder, source / folder if source else None, module, hidden, seed)
    return folders


def _modules(
    out: Path, source: Path | None, config: Any, pooling: str | None
) -> list[dict[str, Any]] | None:
    """The source's modules.json, else the default pipeline when `pooling` is set, else None."""
    modules_file = source / "modules.json" if source is not None else None
    if modules_file is not None and modules_file.is_file():
        if pooling is not None:
            raise UsageError(
                f"{source} has its own modules.json (its pooling is kept); drop pooling."
            )
        return json.loads(modules_file.read_text())
    if pooling is not None:
        return _default_modules(out, pooling, config)
    return None


def _copy_settings(out: Path, source: Path, positions: int | None) -> None:
    """The source's front-end settings files, `max_seq_length` capped at the tiny positions."""
    for name in FRONT_END_FILES[1:]:
        path = source / name
        if path.is_file():
            data = json.loads(path.read_text())
            if isinstance(positions, int) and isinstance(data.get("max_seq_length"), int):
                data["max_seq_length"] = min(data["max_seq_length"], positions)
            _write_json(out / name, data)


def _write_module(
    out: Path, source: Path | None, module: dict[str, Any], hidden: int, seed: int
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    config_path = source / "config.json" if source is not None else None
    if config_path is None or not config_path.is_file():
        return  # a module without settings (Normalize)
    config = {
        k: hidden if k.endswith(_DIMENSION_SUFFIXES) and isinstance(v, int) else v
        for k, v in json.loads(config_path.read_text()).items()
    }
    _write_json(out / "config.json", config)
    shapes = MODULE_WEIGHTS.get(str(module.get("type", "")).rsplit(".", 1)[-1])
    if shapes is not None:
        import torch
        from safetensors.torch import save_file

        generator = torch.Generator().manual_seed(seed)
        tensors = {
            k: torch.randn(shape, generator=generator) * 0.02 for k, shape in shapes(config).items()
        }
        save_file(tensors, str(out / "model.safetensors"))


def _default_modules(out: Path, pooling: str, config: Any) -> list[dict[str, Any]]:
    """What sentence-transformers builds for a plain model, written as the Hub's repos hold it."""
    hidden, positions = _sizes(config)
    _write_json(
        out / "sentence_bert_config.json",
        {"max_seq_length": min(128, positions or 128), "do_lower_case": False},
    )
    _write_json(
        out / "config_sentence_transformers.json",
        {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"},
    )
    pool = out / "1_Pooling"
    pool.mkdir(parents=True, exist_ok=True)
    _write_json(
        pool / "config.json",
        {"word_embedding_dimension": hidden}
        | {
            f"pooling_mode_{m}_token{'s' if m != 'cls' else ''}": m == pooling
            for m in POOLING_MODES
        },
    )
    return [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
    ]


def _sizes(config: Any) -> tuple[int, int | None]:
    """The tiny model's output width (what the Transformer module hands on) and positions."""
    text = config.get_text_config()
    hidden = getattr(text, "hidden_size", None) or text.d_model
    return int(hidden), getattr(text, "max_position_embeddings", None)


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")
