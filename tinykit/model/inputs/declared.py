"""Inputs a model's forward requires beyond token ids and media: those its family's recipe
declares (`[inputs.tensors]`, shapes named by config keys), and required embeddings.

Some forwards read tensors no processor makes: a Decision Transformer's states and actions, a
document model's boxes, a Q-Former's query embeddings, a forecaster's padding mask. A recipe
names each one's shape with config keys, so the shape follows the tiny config:

    [inputs.tensors]
    states = { shape = ["batch", "seq", "state_dim"] }            # random floats
    timesteps = { shape = ["batch", "seq"], high = "max_ep_len" }  # integers in [0, high)
    attention_mask = { shape = ["batch", "seq"], fill = 1 }        # a constant (long; dtype = "bool")
    bbox = { shape = ["batch", "seq", 4], unit = true }            # uniform in [0, 1)

A required argument the recipe does not declare and that holds embeddings (`inputs_embeds`,
`query_embeds`, `*_hidden_states`) gets random floats (batch, seq, hidden width).
"""

from __future__ import annotations

import inspect
from typing import Any

from tinykit._values import is_int
from tinykit.model.inputs.forward import Forward

EMBEDDING_SUFFIXES = ("_embeds", "hidden_states")
"""Required forward arguments read as (batch, seq, hidden) float embeddings."""

WIDTH_KEYS = ("hidden_size", "d_model", "embed_dim", "dim")


def declared_inputs(f: Forward, have: dict[str, Any], seq: int) -> dict[str, Any]:
    """The recipe's declared tensors and the required embeddings `have` lacks, `seq` long."""
    from tinykit.model.recipes import recipe_for

    config, batch, generator = f.config, f.batch, f.generator
    declared = recipe_for(getattr(config, "model_type", "") or "").inputs.get("tensors", {})
    out: dict[str, Any] = {}
    for name, entry in declared.items():
        if name in f.params:  # the family's declaration is more specific than the generic inputs
            out[name] = declared_tensor(config, entry, generator, batch, seq)
    width = next((getattr(config, k) for k in WIDTH_KEYS if is_int(getattr(config, k, None))), 32)
    for name, param in f.params.items():
        required = param.default is inspect.Parameter.empty and param.kind in (
            param.POSITIONAL_OR_KEYWORD,
            param.KEYWORD_ONLY,
        )
        if required and name not in have and name not in out and name.endswith(EMBEDDING_SUFFIXES):
            out[name] = declared_tensor(
                config, {"shape": ["batch", "seq", width]}, generator, batch, seq
            )
    return out


def per_token(f: Forward) -> tuple[str, ...]:
    """The declared tensors the forward reads with one entry per token: (batch, seq, ...)."""
    from tinykit.model.recipes import recipe_for

    declared = recipe_for(getattr(f.config, "model_type", "") or "").inputs.get("tensors", {})
    return tuple(
        name
        for name, entry in declared.items()
        if name in f.params and list(entry["shape"][:2]) == ["batch", "seq"]
    )


def declared_tensor(
    config: Any, entry: dict[str, Any], generator: Any, batch: int, seq: int
) -> Any:
    """One tensor as a recipe declares it (shape named by config keys; fill, high, unit)."""
    import torch

    shape = [declared_size(config, d, batch, seq) for d in entry["shape"]]
    if "fill" in entry:  # a mask: long, or bool where the forward reads a BoolTensor
        dtype = torch.bool if entry.get("dtype") == "bool" else torch.long
        return torch.full(shape, entry["fill"], dtype=dtype)
    if "high" in entry:
        return torch.randint(
            0, declared_size(config, entry["high"], batch, seq), shape, generator=generator
        )
    if entry.get("unit"):  # coordinates normalised to [0, 1): boxes
        return torch.rand(shape, generator=generator)
    return torch.randn(shape, generator=generator)


def declared_size(config: Any, dim: Any, batch: int, seq: int) -> int:
    """A dimension: a number, "batch", "seq", a config key (dotted into sub-configs), or
    arithmetic over keys (`"len(target_layer_ids) * hidden_size"`)."""
    if is_int(dim):
        return int(dim)
    if dim == "batch":
        return batch
    if dim == "seq":
        return seq
    if not str(dim).replace(".", "").replace("_", "").isalnum():  # arithmetic, or `key[0]`
        from tinykit.model.shrink.derive import evaluate

        names = {**config.to_dict(), "batch": batch, "seq": seq}
        value: Any = evaluate(str(dim), names, "[inputs.tensors]")
    else:
        value = config
        for part in str(dim).split("."):
            value = getattr(value, part)
    if not is_int(value):
        raise ValueError(f"recipe [inputs.tensors] names {dim!r}, which is {value!r}, not a size")
    return int(value)
