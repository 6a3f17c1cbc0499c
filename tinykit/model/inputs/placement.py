"""Where image features go in an image-text model's text: as many image tokens as the vision side
yields features, or masks that place them where no image token id does (Kosmos-2's, IDEFICS's).
"""

from __future__ import annotations

import inspect
from typing import Any

from tinykit._values import is_int
from tinykit.model.inputs.forward import Forward

MEDIA_TOKEN_KEYS = ("image_token_id", "image_token_index", "video_token_id", "video_token_index")
"""Where a config names the token its pixels' features replace: the image token, else the video
token of a model that reads frames as its `pixel_values` (InstructBLIP-Video's)."""


def image_token(config: Any) -> int | None:
    for key in MEDIA_TOKEN_KEYS:
        value = getattr(config, key, None)
        if is_int(value):
            return value
    return None


FEATURE_GETTERS = ("get_image_features", "get_video_features")
"""How a model turns its pixels into features: images, else frames (InstructBLIP-Video has only
the latter)."""


def _getter_name(model: Any) -> str:
    base = getattr(model, "base_model", None)
    return next(
        (n for n in FEATURE_GETTERS if hasattr(model, n) or hasattr(base, n)), FEATURE_GETTERS[0]
    )


def image_features_getter(model: Any) -> Any:
    """`get_image_features` (else `get_video_features`) of the model, or of its base model where
    a head class leaves it there (FuyuForCausalLM's); None when neither has one."""
    name = _getter_name(model)
    return getattr(model, name, None) or getattr(getattr(model, "base_model", None), name, None)


def getter_params(model: Any) -> set[str]:
    """What the image-feature getter reads: a head's that passes **kwargs on reads its base
    model's too (VideoLLaMA 3's `image_merge_sizes`)."""
    found: set[str] = set()
    name = _getter_name(model)
    for owner in (model, getattr(model, "base_model", None)):
        getter = getattr(owner, name, None)
        if callable(getter):
            found |= set(inspect.signature(getter).parameters)
    return found


def place_images(f: Forward, media: dict[str, Any], ids: Any) -> tuple[Any, dict[str, Any]]:
    """`ids` with the image tokens the pixels in `media` need in front, and the masks that place
    them otherwise; M-RoPE models (`mm_token_type_ids`) also mark which positions are image."""
    if "pixel_values" not in media:
        return ids, {}
    ids = image_token_ids(f.model, media, ids)
    ids, out = image_position_inputs(f.model, media, ids)
    if "mm_token_type_ids" in f.params:
        token = image_token(f.config)  # (none: a default without image tokens, MiniCPM-V's)
        out["mm_token_type_ids"] = (ids == (-1 if token is None else token)).long()
    return ids, out


def leaves_out_images(f: Forward) -> bool:
    """Whether a tokenizer's text, which holds no image tokens, goes without images: it does for
    an image-text model unless its forward requires pixels (BLIP-2's)."""
    return image_token(f.config) is not None and "pixel_values" not in f.required


def text_only_media(f: Forward, media: dict[str, Any]) -> dict[str, Any]:
    """The media that go with a tokenizer's text: where the forward requires pixels, those it
    requires, placed in front of the text like random text's (optional image inputs left out)."""
    if image_token(f.config) is None:
        return media
    required = f.required
    return {k: v for k, v in media.items() if k in required or not k.startswith(IMAGE_PREFIXES)}


IMAGE_PREFIXES = ("pixel_", "image_")
"""Inputs that go with image tokens: a text of the tokenizer's alone holds none."""


def image_token_ids(model: Any, pixels: dict[str, Any], text: Any) -> Any:
    """`text` (batch, seq) with as many image tokens in front as the vision tower yields features."""
    import torch

    token = image_token(model.config)
    if token is None or image_features_getter(model) is None:
        return text
    per_sample = image_feature_count(model, pixels) // text.shape[0]
    text = text.masked_fill(text == token, 0)  # random text must not hold image tokens itself
    images = torch.full((text.shape[0], per_sample), token, dtype=text.dtype)
    return torch.cat([images, text], dim=1)


def image_feature_count(model: Any, pixels: dict[str, Any]) -> int:
    """How many feature vectors the vision side yields for `pixels`, over the whole batch."""
    import torch

    getter = image_features_getter(model)
    accepted = getter_params(model)
    with torch.no_grad():
        features = getter(**{k: v for k, v in pixels.items() if k in accepted})
    if not isinstance(features, torch.Tensor | list | tuple):  # a ModelOutput
        pooled = getattr(features, "pooler_output", None)
        features = pooled if pooled is not None else features.last_hidden_state
    if isinstance(features, torch.Tensor):
        return features.shape[:-1].numel()
    return sum(f.shape[:-1].numel() for f in features)


def image_position_inputs(model: Any, pixels: dict[str, Any], text: Any) -> tuple[Any, dict]:
    """Masks that place image features in the text where no image token id does: Kosmos-2's
    `image_embeds_position_mask` (one position per feature, in front of the text) and IDEFICS's
    `image_attention_mask` (which of a sample's images each text position attends to)."""
    import torch

    params = set(inspect.signature(model.forward).parameters)
    out: dict[str, Any] = {}
    batch = text.shape[0]
    if "image_embeds_position_mask" in params and image_features_getter(model) is not None:
        per_sample = image_feature_count(model, pixels) // batch
        text = torch.cat([torch.zeros(batch, per_sample, dtype=text.dtype), text], dim=1)
        mask = torch.zeros_like(text)
        mask[:, :per_sample] = 1
        out["image_embeds_position_mask"] = mask
    images = pixels.get("pixel_values")
    if "image_attention_mask" in params and images is not None and images.dim() == 5:
        out["image_attention_mask"] = torch.ones(batch, text.shape[1], images.shape[1]).long()
    return text, out
