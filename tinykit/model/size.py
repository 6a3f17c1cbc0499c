"""Size leaks: dimensions of a built model that its shrink spec does not allow, traced to config keys.

A tiny model stays large when one dimension is never shrunk (an entity vocabulary, a codebook,
a bucket count). Rather than knowing every family, look at every parameter after the build:
a dimension larger than any knob of the spec allows, and not the vocabulary, is a leak; the config
keys (nested sub-configs included) whose value equals it are what to add to recipes/_generic.toml.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tinykit.model.spec import ShrinkSpec

MB = 1_000_000
TEXT_BUDGET = 1 * MB
"""Weights of a text-only tiny model at the default spec."""
MULTIMODAL_BUDGET = 2 * MB
"""Weights of a model with a vision, audio or video tower at the default spec."""
SPREAD = 4
"""A dimension may be this many times the widest knob (fused qkv, gate+up, expanded SSM states)."""
SLACK = 64
"""Rows a table may add to a vocabulary or position count (special tokens, padding offsets)."""


@dataclass(frozen=True)
class Leak:
    """One over-sized dimension: which parameter, how large, and the config keys that set it."""

    parameter: str
    shape: tuple[int, ...]
    dim: int
    keys: tuple[str, ...]
    """`path.key=value` of every config entry equal to `dim`; empty when none is."""

    def __str__(self) -> str:
        where = ", ".join(self.keys) if self.keys else f"no config key equals {self.dim}"
        return f"{where} ({self.parameter} {list(self.shape)})"


def dim_limit(spec: ShrinkSpec) -> int:
    """The largest non-vocabulary dimension the spec's knobs explain."""
    widest = max(spec.hidden, spec.intermediate, spec.expert_intermediate)
    # relative-position tables span both directions: 2 * positions + 1 rows
    return max(SPREAD * widest, 2 * spec.max_positions) + SLACK


def is_multimodal(model: Any) -> bool:
    """Whether the model reads more than token ids: pixels, audio, video or their embeddings."""
    import inspect

    names = set(inspect.signature(model.forward).parameters) | {model.main_input_name}
    return any(n in MEDIA_INPUTS or n.startswith(MEDIA_PREFIXES) for n in names)


MEDIA_INPUTS = ("input_features", "input_values", "input_audio_embeds", "flattened_patches")
MEDIA_PREFIXES = ("pixel_", "image_", "images_", "video_", "videos_", "audio_", "speech_")
"""Forward arguments of non-text inputs: pixels, audio features, video frames, their embeddings."""


def budget(model: Any) -> int:
    return MULTIMODAL_BUDGET if is_multimodal(model) else TEXT_BUDGET


def weight_bytes(model: Any) -> int:
    """Bytes of the parameters (tied weights counted once; buffers such as masks are not weights)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def config_ints(node: Any, path: str = "") -> Iterator[tuple[str, int]]:
    """Every integer setting of a config dict, nested dicts and lists included, as (dotted key, value)."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        where = f"{path}{key}"
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            yield where, value
        elif isinstance(value, dict | list) and not where.endswith(("id2label", "label2id")):
            yield from config_ints(value, f"{where}.")


def find_leaks(model: Any, spec: ShrinkSpec | None = None) -> list[Leak]:
    """Every parameter dimension above the spec's limit that is not a vocabulary size."""
    from tinykit.model.recipes import recipe_for

    spec = spec or ShrinkSpec()
    settings = list(config_ints(model.config.to_dict()))
    vocab_keys = set(recipe_for("").knobs["vocab"])
    vocabs = {v for k, v in settings if k.rsplit(".", 1)[-1] in vocab_keys}
    limit = dim_limit(spec)
    leaks: dict[int, Leak] = {}
    for name, param in model.named_parameters():
        for dim in param.shape:
            vocab_like = any(v <= dim <= v + SLACK for v in vocabs)
            if dim > limit and not vocab_like and dim not in leaks:
                keys = tuple(f"{k}={v}" for k, v in settings if v == dim)
                leaks[dim] = Leak(name, tuple(param.shape), dim, keys)
    return sorted(leaks.values(), key=lambda leak: -leak.dim)


def size_problems(model: Any, spec: ShrinkSpec | None = None) -> list[str]:
    """One line per leak, plus one when the weights exceed the budget of a default-or-smaller spec."""
    spec = spec or ShrinkSpec()
    problems = [f"size leak: {leak}" for leak in find_leaks(model, spec)]
    total, allowed = weight_bytes(model), budget(model)
    if total > allowed and _within_defaults(spec):
        problems.append(
            f"weights are {total / MB:.2f} MB, over the {allowed / MB:.0f} MB budget of a tiny "
            f"model: shrink the config keys named above (recipes/_generic.toml [knobs] or [cap])"
        )
    return problems


def _within_defaults(spec: ShrinkSpec) -> bool:
    """The byte budget holds for the default sizes; a user who asks for a wider model gets one,
    and faithful mode keeps the source's whole vocabulary."""
    if spec.mode != "tiny":
        return False
    default = ShrinkSpec()
    sizes = ("hidden", "intermediate", "vocab", "experts", "expert_intermediate", "max_positions")
    return all(getattr(spec, n) <= getattr(default, n) for n in sizes) and spec.layers in (
        "auto",
        *range(1, 5),
    )
