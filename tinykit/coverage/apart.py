"""Rows set apart from pass and fail: a type transformers itself cannot build or run at full size
(`upstream_error`), and a type that needs a package this environment lacks (`missing_package`:
timm, natten, detectron2, torchaudio, ...), reported as "needs PACKAGE" with transformers' reason.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

MISSING_PACKAGE = (
    # transformers' requires_backends messages: "X requires the timm library but it was not found"
    re.compile(r"requires the (\w[\w.-]*) library but it was not found"),
    # a module imported by model code: "No module named 'natten'"
    re.compile(r"No module named '(\w+)"),
    # "... requires torchaudio (not installed)"; "... scheduler requires `diffusers`. Install it"
    re.compile(r"(?:requires|needs) `?(\w[\w.-]*)`? \(not installed\)"),
    re.compile(r"requires `(\w[\w.-]*)`\. Install it"),
)
"""How a missing optional package is worded in the errors a type fails with."""


def missing_package(reason: str | None) -> str:
    """The package a failure says is missing, or "" when it names none."""
    for pattern in MISSING_PACKAGE:
        found = pattern.search(reason or "")
        if found:
            return found.group(1)
    return ""


def upstream_error(model_type: str, class_name: str | None = None) -> str | None:
    """transformers' own failure on this type's default config at full size, on the meta device,
    with the class the sweep builds: construction, then (for token-id models) a forward pass.
    None when transformers' defaults build and run: then a failure is tinykit's."""
    import torch
    import transformers

    from tinykit.model.build import class_and_config
    from tinykit.model.config import load_config
    from tinykit.model.inputs import Inputs, make_inputs

    try:
        raw = {"model_type": model_type}
        requested = getattr(transformers, class_name or "", None)
        cls, config = class_and_config(raw, load_config(raw), requested=requested)
        with torch.device("meta"):
            model = cls._from_config(config)
    except Exception as e:  # any failure of transformers' own defaults
        return f"{type(e).__name__}: {flat_message(e)[:200]}"
    if inference_only(type(model).forward):  # no input makes such a forward trainable
        return (
            f"{type(model).__name__}.forward runs under torch.inference_mode (a streaming step "
            "over an inference session): transformers gives it no trainable forward"
        )
    # a class without a forward of its own (Bark's, which only chains its sub-models' generate)
    # fails any call, with no inputs as with the tiny model's
    unimplemented = type(model).forward is torch.nn.Module.forward
    on_ids = _judged_on_token_ids(model_type)
    if not unimplemented and not on_ids and not _reads_token_ids_only(model):
        # a tower alone, or a model that also reads pixels, audio or state: a forward on token
        # ids alone fails for want of those inputs, which proves nothing of transformers; its
        # loss is dispatched by class, the same at any size
        return unmapped_loss(model)
    # the inputs and labels verify trains it on, as host tensors: the full-size weights are on
    # the meta device
    try:
        if unimplemented:
            made = Inputs({})
        elif on_ids:  # the text alone: images are left out where the forward allows it
            ids = torch.randint(0, _vocab(model), (1, 8))
            made = make_inputs(model, text=ids, labels=True)
        else:
            made = make_inputs(model, batch=1, seq=8, labels=True)
    except Exception:  # inputs tinykit cannot make: its own failure, not transformers'
        return None
    try:
        with torch.device("meta"):
            model(**made.forward, **made.labels)
    except Exception as e:  # the full-size default fails where the tiny one did, or elsewhere
        return f"forward: {type(e).__name__}: {flat_message(e)[:200]}"
    return None


def _judged_on_token_ids(model_type: str) -> bool:
    """Whether the family's recipe says a full-size failure on token ids alone judges it
    (`[inputs] full_size_on_token_ids`): a media model whose failure is shown not to depend on
    its media, and whose full-size forward with media cannot run on the meta device."""
    from tinykit.model.recipes import recipe_for

    return bool(recipe_for(model_type).inputs.get("full_size_on_token_ids"))


def _vocab(model: Any) -> int:
    return int(model.config.get_text_config(decoder=True).vocab_size)


FALLBACK_LOSS = "ForCausalLMLoss()"
"""How the loss transformers falls back to is named in a failure inside it (a head whose labels
are no next tokens calls it without `vocab_size`)."""


def unmapped_loss(model: Any) -> str | None:
    """Where transformers maps no loss to the class (its `loss_type` is None: no entry of its
    LOSS_MAPPING matches the class name) but the forward takes labels: training falls back to
    ForCausalLMLoss, whatever the size (Nemotron ASR's RNN-T heads). None otherwise."""
    if "labels" not in inspect.signature(model.forward).parameters:
        return None
    if getattr(model, "loss_type", "") is not None:
        return None
    return (
        f"loss: transformers maps no loss to {type(model).__name__} (loss_type None): "
        f"labels fall back to {FALLBACK_LOSS.removesuffix('()')}"
    )


def inference_only(forward: Any) -> bool:
    """Whether `forward` is wrapped in `@torch.inference_mode()` (SAM 3's video tracker steps
    a session that way): its outputs never carry a graph, so no loss of them trains. torch's
    decorator keeps the mode in its wrapper's `ctx_factory` cell, the model's code in
    `__wrapped__`."""
    import torch

    while forward is not None:
        code = getattr(forward, "__code__", None)
        cells = dict(zip(code.co_freevars, forward.__closure__ or (), strict=True)) if code else {}
        factory = cells["ctx_factory"].cell_contents if "ctx_factory" in cells else None
        if isinstance(getattr(factory, "__self__", None), torch.inference_mode):
            return True
        forward = getattr(forward, "__wrapped__", None)
    return False


NON_TEXT_PREFIXES = ("pixel_", "input_features", "input_values", "audio_", "video_", "image_")
NON_TEXT_INPUTS = ("flattened_patches", "state", "latents", "past_values")


def _reads_token_ids_only(model: Any) -> bool:
    """Whether token ids are all the forward needs: it reads input_ids, requires nothing else
    and names no pixel, audio, state or series input."""
    params = inspect.signature(model.forward).parameters
    required = {n for n, p in params.items() if p.default is p.empty and p.kind <= p.KEYWORD_ONLY}
    media = [n for n in params if n.startswith(NON_TEXT_PREFIXES) or n in NON_TEXT_INPUTS]
    return "input_ids" in params and required <= {"input_ids"} and not media


def flat_message(e: BaseException) -> str:
    """The message on one line: a row's reason is one line (transformers' ImportErrors open
    with a blank one)."""
    return " ".join(str(e).split())


def is_upstream(reason: str, error: str | None) -> bool:
    """Set apart only when transformers fails at full size: to build, in the same way, or in
    the loss it falls back to for a class it maps none to."""
    if error is None:
        return False
    if error.startswith("loss: "):  # the tiny model failed inside the loss it falls back to
        return FALLBACK_LOSS in reason
    if not error.startswith("forward: "):
        return True
    return error.removeprefix("forward: ")[:60] in reason
