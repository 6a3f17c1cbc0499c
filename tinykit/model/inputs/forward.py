"""The forward being fed, read once (parameters, config, the batch asked for), and the small
helpers every modality's inputs share."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Forward:
    """A model's forward and the inputs asked of it: `batch` samples of `seq` tokens, random
    values drawn from `generator`."""

    model: Any
    batch: int
    seq: int
    generator: Any
    params: dict[str, inspect.Parameter]
    """The forward's parameters by name."""
    main: str
    """The input the model is fed by: its `main_input_name`, or the family recipe's
    `[inputs] main_input` where the class names its token ids but real use feeds another input
    (Pop2Piano's encoder reads `input_features`, which its generate requires)."""

    @classmethod
    def of(cls, model: Any, batch: int, seq: int, generator: Any) -> Forward:
        from tinykit.model.recipes import recipe_for

        params = dict(inspect.signature(model.forward).parameters)
        recipe = recipe_for(getattr(model.config, "model_type", "") or "").inputs
        named = model.main_input_name  # a list where a class names several (OneFormer's)
        main = str(recipe.get("main_input") or (named[0] if isinstance(named, list) else named))
        return cls(model, batch, seq, generator, params, main)

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def names(self) -> set[str]:
        return set(self.params)

    @property
    def required(self) -> set[str]:
        return {n for n, p in self.params.items() if p.default is p.empty}

    @property
    def vision(self) -> Any:
        """The vision tower's config, or the model's own for a tower alone."""
        return getattr(self.config, "vision_config", None) or self.config

    def reads_token_ids(self) -> bool:
        """Token ids are text here (a speech model's `input_ids` are its decoder's, made apart)."""
        return "input_ids" in self.params and self.main != "input_features"


def keep_accepted(out: Any, params: set[str]) -> dict[str, Any]:
    """A processor's outputs the forward reads; its token ids are never the text's. A vision
    tower alone reads as `pixel_*` what its composite's processor names `image_*` (Gemma 4's
    `image_position_ids` are its tower's `pixel_position_ids`)."""
    kept = {}
    for name, value in out.items():
        if name not in params and name.startswith("image_"):
            name = "pixel_" + name.removeprefix("image_")
        if name in params and name != "input_ids":
            kept[name] = value
    return kept


def runs(model: Any, inputs: dict[str, Any]) -> bool:
    """Whether `model(**inputs)` runs: how a layout a config does not name is told apart."""
    import torch

    try:
        with torch.no_grad():
            model(**inputs)
    except Exception:  # this layout does not suit the model: the caller tries the next
        return False
    return True
