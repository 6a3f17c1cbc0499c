"""Size leaks: dimensions of a built model that its shrink spec does not allow, traced to config keys.

A tiny model stays large when one dimension is never shrunk (an entity vocabulary, a codebook,
a bucket count, a block size that sizes a persistent buffer). Rather than knowing every family,
look at every tensor that is saved (parameters and persistent buffers: the state dict) after the
build: a dimension larger than any knob of the spec allows, and not the vocabulary, is a leak;
the config keys (nested sub-configs included) whose value equals it are what to add to
recipes/_generic.toml. The budget is held on the weight files as written, and a folder over it
names the tensors that hold the excess, traced to their keys the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
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

    import torch

    main = model.main_input_name  # a list where a class names several (OneFormer's)
    names = set(inspect.signature(model.forward).parameters) | set(
        main if isinstance(main, list) else [main]
    )
    if type(model).forward is torch.nn.Module.forward:  # no forward of its own (Qwen2.5-Omni's
        for child in model.children():  # chains its stages): what its stages read
            names |= set(inspect.signature(child.forward).parameters)
    return any(n in MEDIA_INPUTS or n.startswith(MEDIA_PREFIXES) for n in names)


MEDIA_INPUTS = ("input_features", "input_values", "input_audio_embeds", "flattened_patches")
MEDIA_PREFIXES = ("pixel_", "image_", "images_", "video_", "videos_", "audio_", "speech_")
"""Forward arguments of non-text inputs: pixels, audio features, video frames, their embeddings."""


def budget(model: Any) -> int:
    return MULTIMODAL_BUDGET if is_multimodal(model) else TEXT_BUDGET


def saved_bytes(folder: Path) -> int:
    """Bytes of the folder's weight files as written: every saved tensor (parameters and
    persistent buffers, a tied weight once) and the files' headers."""
    from tinykit.hub.layout import is_weight_file

    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and is_weight_file(p.name))


def saved_tensors(model: Any) -> dict[str, tuple[tuple[int, ...], int]]:
    """name -> (shape, bytes) of every tensor `save_pretrained` writes: the state dict, which
    holds the parameters and the persistent buffers; a tied weight once (on the meta device,
    where nothing has an address, under each of its names)."""
    out: dict[str, tuple[tuple[int, ...], int]] = {}
    seen: set[tuple[int, int]] = set()
    for name, t in model.state_dict().items():
        where = (t.data_ptr(), t.numel())
        if t.device.type != "meta" and where in seen:
            continue
        seen.add(where)
        out[name] = (tuple(t.shape), t.numel() * t.element_size())
    return out


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


class _Keys:
    """The config's integer settings, and which dimensions its vocabularies explain."""

    def __init__(self, model: Any) -> None:
        from tinykit.model.recipes import recipe_for

        self.settings = list(config_ints(model.config.to_dict()))
        vocab_keys = set(recipe_for("").knobs["vocab"])
        self.vocabs = {v for k, v in self.settings if k.rsplit(".", 1)[-1] in vocab_keys}

    def vocab_like(self, dim: int) -> bool:
        return any(v <= dim <= v + SLACK for v in self.vocabs)

    def leak(self, name: str, shape: tuple[int, ...], dim: int) -> Leak:
        return Leak(name, shape, dim, tuple(f"{k}={v}" for k, v in self.settings if v == dim))


def find_leaks(model: Any, spec: ShrinkSpec | None = None) -> list[Leak]:
    """Every dimension of a saved tensor above the spec's limit that is not a vocabulary size."""
    keys, limit = _Keys(model), dim_limit(spec or ShrinkSpec())
    leaks: dict[int, Leak] = {}
    for name, (shape, _) in saved_tensors(model).items():
        for dim in shape:
            if dim > limit and not keys.vocab_like(dim) and dim not in leaks:
                leaks[dim] = keys.leak(name, shape, dim)
    return sorted(leaks.values(), key=lambda leak: -leak.dim)


def heaviest(model: Any, excess: int, spec: ShrinkSpec | None = None) -> list[str]:
    """The fewest largest saved tensors that hold `excess` bytes, each with its dimensions wider
    than the spec's widest knob traced to the config keys equal to them (MiniMax's
    `diagonal_decay` buffer, [1, heads, block_size, block_size])."""
    spec = spec or ShrinkSpec()
    keys, widest = _Keys(model), max(spec.hidden, spec.intermediate, spec.expert_intermediate)
    found: list[str] = []
    for name, (shape, size) in sorted(saved_tensors(model).items(), key=lambda t: -t[1][1]):
        if excess <= 0 or len(found) == 3:
            break
        excess -= size
        dims = [d for d in dict.fromkeys(shape) if d > widest and not keys.vocab_like(d)]
        traced = ", ".join(k for d in dims for k in keys.leak(name, shape, d).keys)
        found.append(f"{name} {list(shape)} holds {size / MB:.2f} MB ({traced or 'no key'})")
    return found


def size_problems(model: Any, folder: Path, spec: ShrinkSpec | None = None) -> list[str]:
    """One line per leak, plus one when the weight files exceed the budget of a
    default-or-smaller spec, naming the tensors that hold the excess."""
    spec = spec or ShrinkSpec()
    problems = [f"size leak: {leak}" for leak in find_leaks(model, spec)]
    total, allowed = saved_bytes(folder), budget(model)
    if total > allowed and _within_defaults(spec):
        problems.append(
            f"weights are {total / MB:.2f} MB on disk, over the {allowed / MB:.0f} MB budget of "
            f"a tiny model: {'; '.join(heaviest(model, total - allowed, spec))}; shrink the "
            "config keys named (recipes/_generic.toml [knobs] or [cap])"
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
