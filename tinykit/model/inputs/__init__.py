"""inputs: THE input maker. Every forward pass tinykit makes (verify and its tokenizer probe,
coverage's full-size check, `slice --check`, `mem project`, `fixtures compat`) is fed by
`make_inputs`, so a new modality or label layout is learnt in one place.

    made = make_inputs(model, labels=True)      # 2 samples of 16 tokens, seed 0
    model(**made.forward, **made.labels)

Token ids come from text.py, the non-text towers' inputs from the first row of media.py's
MODALITIES that applies (image.py, patches.py, audio.py, series.py; processors.py builds a
type's processor at the tiny geometry), image tokens from placement.py, and whatever else the
forward requires from the family's recipe (declared.py). Every random value is drawn from
`generator`, in a fixed order, so the same model gets the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tinykit.model.inputs.declared import declared_inputs, per_token
from tinykit.model.inputs.forward import Forward
from tinykit.model.inputs.media import media_inputs
from tinykit.model.inputs.placement import leaves_out_images, place_images, text_only_media
from tinykit.model.inputs.text import decoder_inputs, make_labels, random_ids, side_token_inputs

__all__ = ["BATCH", "SEQ", "Inputs", "make_inputs"]

BATCH, SEQ = 2, 16


@dataclass
class Inputs:
    """A forward's keyword arguments, and the labels a training step adds to them."""

    forward: dict[str, Any]
    labels: dict[str, Any] = field(default_factory=dict)
    along_text: tuple[str, ...] = ("input_ids", "mm_token_type_ids")
    """Forward inputs with one entry per token (ids, token types, UDOP's boxes): a prompt cut
    from the token ids cuts these too."""

    def to(self, device: Any, dtype: Any = None) -> Inputs:
        """The tensors moved to `device`; floating ones cast to `dtype` (the model's) if given."""

        def move(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: move(v) for k, v in value.items()}
            if isinstance(value, list):
                return [move(v) for v in value]
            if not hasattr(value, "to"):
                return value
            cast = dtype if dtype is not None and value.is_floating_point() else None
            return value.to(device=device, dtype=cast)

        return Inputs(move(self.forward), move(self.labels), self.along_text)


def make_inputs(
    model: Any,
    *,
    batch: int = BATCH,
    seq: int = SEQ,
    generator: Any = None,
    labels: bool = False,
    text: Any = None,
) -> Inputs:
    """Random inputs for `model.forward`, shaped from its config: token ids, pixels, audio or a
    series, and the tensors its recipe declares; with `labels=True`, a training step's targets.

    `text` gives the token ids (a tokenizer's encoding, `(batch, tokens)`) instead of random
    ones; images that go with image tokens are then left out unless the forward requires them.
    `generator` is a torch.Generator (default: seeded 0). An encoder-decoder's decoder reads the
    encoder's ids, or with labels, the label rule's decoder input.
    """
    import torch

    if generator is None:
        generator = torch.Generator().manual_seed(0)
    f = Forward.of(model, batch if text is None else text.shape[0], seq, generator)
    ids = random_ids(f) if text is None else text
    # pixels, frames, audio or a series, via the processor; none beside a text without images
    media = {} if text is not None and leaves_out_images(f) else media_inputs(f)
    media.update(side_token_inputs(f, seq))  # they go with the pixels (InstructBLIP's)
    if text is not None:
        media = text_only_media(f, media)
    forward = {**media}
    if f.reads_token_ids():
        ids, placed = place_images(f, media, ids)
        forward.update(placed)
        forward["input_ids"] = ids
    # what else the forward requires: recipe-declared tensors (boxes, states), embeddings
    forward.update(declared_inputs(f, forward, ids.shape[1]))
    along = ("input_ids", "mm_token_type_ids", *per_token(f))
    if not labels:
        return Inputs({**forward, **decoder_inputs(f, forward)}, along_text=along)
    targets, changed = make_labels(f, forward)
    return Inputs({**forward, **changed}, targets, along)
