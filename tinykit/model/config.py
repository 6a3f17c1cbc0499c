"""Load a transformers config and shrink it: the generic rules (model/shrink/) applied to
every nested sub-config.

The source config is loaded through its class (so class defaults fill what config.json
omits), read as a full dict, and every knob the recipe vocabulary names is given its tiny
value. The result is written onto the source's *diff* dict (only what differs from the
class defaults) and built through the constructor again, so every derived attribute
(`head_dim`, `layer_types`, ...) is recomputed rather than left stale.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinykit._configs import from_dict
from tinykit._values import is_int
from tinykit.errors import ShrinkConstraintError, UnsupportedModelError
from tinykit.model.layers import LayerPlan
from tinykit.model.shrink.nodes import Context, shrink_node
from tinykit.model.shrink.token_ids import remap_token_ids
from tinykit.model.spec import ShrinkSpec


@dataclass
class ShrunkConfig:
    """A built tiny config and how it was derived."""

    config: Any
    plans: dict[str, LayerPlan] = field(default_factory=dict)
    recipes: tuple[str, ...] = ()


def config_class(model_type: str) -> type:
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise UnsupportedModelError(
            f"model_type {model_type!r} is not in this transformers' CONFIG_MAPPING. It needs remote "
            f"code or a newer transformers: upgrade transformers, or pass --trust-remote-code for a Hub repo.",
            model_type=model_type,
        )
    return CONFIG_MAPPING[model_type]


def load_config(raw: dict[str, Any], remote_code: Path | None = None) -> Any:
    """The source config object (class defaults filled in).

    Native model types drop `auto_map`; `remote_code` (a folder, on --trust-remote-code) loads a
    non-native type's class from the repository's own code instead.
    """
    if remote_code is not None:
        from transformers import AutoConfig

        cls = type(AutoConfig.from_pretrained(remote_code, trust_remote_code=True))
        return from_dict(cls, raw)
    cls = config_class(raw["model_type"])
    try:
        return from_dict(cls, {k: v for k, v in raw.items() if k != "auto_map"})
    except Exception as e:  # transformers raises many kinds on a malformed config
        why = " ".join(str(e).split())  # its validators' messages span lines: the error is one
        raise UnsupportedModelError(
            f"config.json of model_type {raw['model_type']!r} does not load with {cls.__name__}: {why}. "
            f"Check the file, or the transformers version it needs.",
            model_type=raw["model_type"],
        ) from e


def shrink_config(
    raw: dict[str, Any],
    spec: ShrinkSpec,
    *,
    vocab: int | None = None,
    token_ids: dict[int, int] | None = None,
    keep_depth: bool = False,
    recipes: tuple[str, ...] = (),
    remote_code: Path | None = None,
) -> ShrunkConfig:
    """Shrink `raw` (a config.json dict) to `spec`.

    The vocab becomes `vocab` (a shrunk tokenizer's size) or spec.vocab; in faithful mode the
    source's vocab and token ids are kept.

    `keep_depth=True` shrinks the width only: the result has the source's layer structure,
    for comparing block types. `token_ids` maps source special-token ids to tiny ones.
    """
    source = load_config(raw, remote_code)
    full = source.to_dict()
    base = source.to_diff_dict()
    original = copy.deepcopy(base)
    plans: dict[str, LayerPlan] = {}
    used: set[str] = set()
    faithful = spec.mode == "faithful"
    vocab = None if faithful else vocab or spec.vocab
    ctx = Context(spec, vocab, keep_depth, recipes, plans, used, remote_code is not None)
    shrink_node(full, base, "", ctx)
    _give_image_token(full, base)
    if vocab is not None:
        remap_token_ids(base, vocab, token_ids)
    _drop_derived(type(source), base, original)
    try:
        config = from_dict(type(source), base)
        if hasattr(config, "validate"):
            config.validate()
    except ShrinkConstraintError:
        raise
    except Exception as e:
        raise ShrinkConstraintError(
            f"the shrunk {raw['model_type']} config is invalid: {e}. Try other sizes, or add a recipe "
            f"(recipes/*.toml, or --recipe PATH) that sets the field it names.",
            field="config",
            value=raw["model_type"],
            constraint=str(e),
        ) from e
    return ShrunkConfig(config, plans, tuple(sorted(used)))


def _drop_derived(cls: Any, base: dict[str, Any], original: dict[str, Any]) -> None:
    """Keys the config class computes itself from its fields (EfficientLoFTR's per-block channel
    lists, from `out_features`) are left to it: the source's full-size values, saved beside
    the fields and untouched by the shrink, would otherwise be set back over the recomputed
    ones."""
    import dataclasses

    config_class = cls  # (is_dataclass narrows cls to a dataclass type, which lacks from_dict)
    if not dataclasses.is_dataclass(cls):
        return
    fields = {f.name for f in dataclasses.fields(cls)}
    stale = [
        k
        for k, v in base.items()
        if k not in fields and k in original and original[k] == v and not isinstance(v, dict)
    ]
    if not stale:
        return
    try:
        probe = from_dict(config_class, {k: v for k, v in base.items() if k not in stale})
    except Exception:  # the shrunk config's own errors are reported by the caller
        return
    for key in stale:
        if hasattr(probe, key) and getattr(probe, key) != base[key]:
            base.pop(key)


def _give_image_token(full: dict[str, Any], base: dict[str, Any]) -> None:
    """An image-text default whose image (or, for a video model, video) token the class leaves
    None (MiniCPM-V's, Nemotron-H Omni's, InstructBLIP-Video's; every real config names one)
    ignores its vision tower: it gets the id just past the source vocab, which the token-id
    remap then places at the tiny vocab's top."""
    from tinykit.model.inputs.placement import MEDIA_TOKEN_KEYS

    if "vision_config" not in full:
        return
    text = full.get("text_config")
    source_vocab = (text if isinstance(text, dict) else full).get("vocab_size")
    if any(is_int(full.get(key)) for key in MEDIA_TOKEN_KEYS):
        return  # it has one (a video token left None beside an image token is not needed)
    for key in MEDIA_TOKEN_KEYS:
        if key in full and full[key] is None and is_int(source_vocab):
            base[key] = source_vocab
            return
