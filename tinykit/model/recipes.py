"""Recipes: per-architecture shrink knowledge as data (TOML files in recipes/).

`_generic.toml` names the config keys each generic rule applies to, and caps and derives the
sizes of sub-structures that many families name alike (MLA ranks, Mamba states); those apply
wherever a config has the key. Every other file covers one
family and may add, for the model_types it lists:
  [aliases]  extra key names for a generic knob, e.g. `intermediate = ["d_ff"]`
  [cap]      family-specific size keys and their maximum, e.g. `kv_lora_rank = 16`
  [set]      fixed values the rules cannot derive, e.g. `decoder_start_token_id = 0`
  [derive]   values recomputed from the shrunk config where it has the key,
             e.g. `qk_head_dim = "qk_nope_head_dim + qk_rope_head_dim"`
  [files]    files beside the weights the class's from_pretrained loads, made at the tiny
             geometry (model/recipe_files.py), e.g. Qwen2.5-Omni's `spk_dict.pt`
  [inputs]   how verify's sample inputs depart from the generic layout, e.g.
             `labels_per_codebook = "num_codebooks"` (labels of shape (batch, seq, codebooks))
  [generation]  settings `generate` requires that a bare config's generation config lacks
             (Pop2Piano's `composer_to_feature_token`) or holds otherwise (CLVP's
             `return_dict_in_generate`); a source's own settings win
Users add files with `--recipe PATH`; a later file overrides an earlier one key by key.
`_presets.toml` holds named shape presets (`--preset hub-tiny-random`): ShrinkSpec defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tinykit._recipes import load_recipes, read_recipe, recipes_dir
from tinykit.errors import UsageError

__all__ = ["Recipe", "preset", "presets", "recipe_for", "recipes_dir"]


@dataclass(frozen=True)
class Recipe:
    """The merged shrink knowledge for one model_type."""

    knobs: dict[str, tuple[str, ...]]
    layer_fields: dict[str, tuple[Any, ...]]
    drop: tuple[str, ...]
    cap: dict[str, int] = field(default_factory=dict)
    set: dict[str, Any] = field(default_factory=dict)
    derive: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()


def presets() -> dict[str, dict[str, Any]]:
    """Preset name -> the ShrinkSpec values it sets (recipes/_presets.toml)."""
    return read_recipe(recipes_dir() / "_presets.toml")


def preset(name: str) -> dict[str, Any]:
    """The ShrinkSpec values of preset `name`, or a one-line UsageError naming the presets."""
    from tinykit._suggest import hint

    known = presets()
    if name not in known:
        raise UsageError(
            f"--preset {name!r} is unknown.{hint(name, known)} Presets: {', '.join(sorted(known))}."
        )
    return dict(known[name])


def recipe_for(model_type: str, extra: tuple[str, ...] = ()) -> Recipe:
    """The generic vocabulary merged with every family file that lists `model_type`."""
    generic, families = load_recipes(tuple(extra))
    knobs = {k: list(v) for k, v in generic["knobs"].items()}
    cap: dict[str, int] = dict(generic.get("cap", {}))
    fixed: dict[str, Any] = {}
    derive: dict[str, str] = dict(generic.get("derive", {}))
    inputs: dict[str, Any] = {}
    generation: dict[str, Any] = {}
    files: dict[str, Any] = {}
    sources = ["_generic.toml"]
    for name, data in families:
        if model_type not in data.get("model_types", ()):
            continue
        sources.append(name)
        for knob, keys in data.get("aliases", {}).items():
            if knob not in knobs:
                raise UsageError(
                    f"recipe {name}: unknown knob {knob!r} in [aliases]. Known: {', '.join(knobs)}."
                )
            knobs[knob] = [*keys, *knobs[knob]]
        cap.update(data.get("cap", {}))
        fixed.update(data.get("set", {}))
        derive.update(data.get("derive", {}))
        inputs.update(data.get("inputs", {}))
        generation.update(data.get("generation", {}))
        files.update(data.get("files", {}))
    return Recipe(
        knobs={k: tuple(v) for k, v in knobs.items()},
        layer_fields={k: tuple(v) for k, v in generic["layer_fields"].items()},
        drop=tuple(generic["drop"]["keys"]),
        cap=cap,
        set=fixed,
        derive=derive,
        inputs=inputs,
        generation=generation,
        files=files,
        sources=tuple(sources),
    )
