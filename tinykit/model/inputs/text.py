"""Token inputs: ids, a second tower's ids, an encoder-decoder's decoder ids, and the labels a
training step scores (next tokens, seq2seq targets, transducer labels, latent frames, detection
targets), each in the layout the family's recipe names ([inputs]).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tinykit._values import is_int
from tinykit.model.inputs.forward import Forward

Made = dict[str, Any]
"""The forward's inputs made so far."""


def vocab_size(f: Forward) -> int:
    """The (decoder's) text vocabulary; 64 where the config names none."""
    text = f.config.get_text_config(decoder=True)
    return getattr(text, "vocab_size", None) or 64


def recipe_input(config: Any, name: str) -> int | None:
    """The config value an [inputs] entry of the family's recipe names, e.g. the
    `sequence_length = "max_position_embeddings"` of a model that reads fixed-length text."""
    from tinykit.model.recipes import recipe_for

    key = recipe_for(getattr(config, "model_type", "") or "").inputs.get(name)
    value = getattr(config, str(key), None) if key else None
    return value if is_int(value) and value > 0 else None


def random_ids(f: Forward) -> Any:
    """(batch, seq) random ids, or the fixed length a family reads (Perceiver's decoder queries
    every one of max_position_embeddings positions, so its labels must be that long too)."""
    import torch

    seq = recipe_input(f.config, "sequence_length") or f.seq
    return torch.randint(0, vocab_size(f), (f.batch, seq), generator=f.generator)


def side_token_inputs(f: Forward, seq: int) -> Made:
    """Token ids of a second text tower the forward requires (InstructBLIP's `qformer_input_ids`
    for its Q-Former's instruction), in the vocabulary of the sub-config of that name."""
    import torch

    out: Made = {}
    for name, param in f.params.items():
        tower = name.removesuffix("_input_ids")
        if tower == name or tower in ("", "decoder") or param.default is not param.empty:
            continue
        vocab = getattr(getattr(f.config, f"{tower}_config", None), "vocab_size", None)
        if is_int(vocab):
            out[name] = torch.randint(0, vocab, (f.batch, seq), generator=f.generator)
    return out


def _codebooks(f: Forward) -> int | None:
    """Codebooks of a multi-codebook decoder (MusicGen's reads one row of ids per codebook)."""
    value = getattr(f.config.get_text_config(decoder=True), "num_codebooks", None)
    return value if isinstance(value, int) else None


def decoder_inputs(f: Forward, made: Made) -> Made:
    """What an encoder-decoder's decoder reads without labels: the encoder's ids (random ids of
    its own where the encoder reads no text: speech, pixels), one row per codebook, within the
    decoder's vocabulary. With labels, the label rule gives the decoder its input instead."""
    if "decoder_input_ids" not in f.params or not getattr(f.config, "is_encoder_decoder", False):
        return {}
    ids = made["input_ids"] if "input_ids" in made else random_ids(f)
    rows = _codebooks(f) or 1
    return {"decoder_input_ids": (ids % vocab_size(f)).repeat_interleave(rows, dim=0)}


# -- labels: the first rule of LABEL_RULES that applies makes them ----------------------------


def make_labels(f: Forward, made: Made) -> tuple[Made, Made]:
    """(labels, inputs they change): a training step's targets, where the forward reads any."""
    if "return_loss" in f.params:  # a contrastive model scores its own batch
        return {"return_loss": True}, {}
    if "labels" not in f.params:
        return {}, {}
    for _name, applies, make in LABEL_RULES:
        if applies(f, made):
            return make(f, made)
    return {}, {}


def _reads_targets(f: Forward) -> bool:
    """Labels annotated as a list of dicts: a detector's per-image targets (DETR's, RT-DETR's),
    not token ids, even where the config calls the model an encoder-decoder. (A zero-shot
    detector's classes are phrases of its text, which random ids have none of: Grounding DINO
    reads input_ids and trains on its outputs.)"""
    return "list[dict" in str(f.params["labels"].annotation) and "input_ids" not in f.params


def _detection_targets(f: Forward, made: Made) -> tuple[Made, Made]:
    """Two objects per image: class ids below num_labels, boxes as (cx, cy, w, h) in (0, 1), and
    masks at the image's size (instance segmentation heads, RF-DETR's, score them)."""
    import torch

    pixels = made.get("pixel_values")
    side = tuple(pixels.shape[-2:]) if pixels is not None else (32, 32)
    classes = max(1, getattr(f.config, "num_labels", 1) or 1)
    targets = []
    for _ in range(f.batch):
        centers = torch.rand(2, 2, generator=f.generator) * 0.5 + 0.25
        sides = torch.rand(2, 2, generator=f.generator) * 0.4 + 0.1
        labels = torch.randint(0, classes, (2,), generator=f.generator)
        masks = (torch.rand(2, *side, generator=f.generator) > 0.5).float()
        boxes = torch.cat([centers, sides], dim=1)
        targets.append({"class_labels": labels, "boxes": boxes, "masks": masks})
    return {"labels": targets}, {}


def _is_transducer(f: Forward) -> bool:
    """An RNN-T/TDT model: a blank token and a prediction network read decoder_input_ids."""
    return is_int(getattr(f.config, "blank_token_id", None)) and "decoder_input_ids" in f.params


def transducer_labels(config: Any, vocab: int, generator: Any, batch: int, seq: int) -> Any:
    """Labels of seq // 2 non-blank, non-pad tokens and the prediction network's input: the
    blank (start) token, then the labels (its joint output scores U + 1 label positions)."""
    import torch

    reserved = {getattr(config, k, None) for k in ("blank_token_id", "pad_token_id")}
    allowed = torch.tensor([i for i in range(vocab) if i not in reserved])
    labels = allowed[torch.randint(0, len(allowed), (batch, seq // 2), generator=generator)]
    start = torch.full((batch, 1), config.blank_token_id, dtype=torch.long)
    return labels, torch.cat([start, labels], dim=1)


def _transducer(f: Forward, made: Made) -> tuple[Made, Made]:
    labels, decoder = transducer_labels(f.config, vocab_size(f), f.generator, f.batch, f.seq)
    return {"labels": labels}, {"decoder_input_ids": decoder}


def _is_seq2seq(f: Forward, made: Made) -> bool:
    # (a detector's labels are boxes, Grounding DINO's: it is a classifier here)
    return getattr(f.config, "is_encoder_decoder", False) and not _is_classifier(f.model)


def _seq2seq(f: Forward, made: Made) -> tuple[Made, Made]:
    """Random targets of seq // 2 tokens and a decoder input as long. A multi-codebook decoder
    (MusicGen's) reads (batch * codebooks, seq) token rows and is trained on (batch, seq,
    codebooks) labels."""
    import torch

    vocab, codebooks = vocab_size(f), _codebooks(f)
    per_step = (codebooks,) if codebooks is not None else ()
    labels = torch.randint(0, vocab, (f.batch, f.seq // 2, *per_step), generator=f.generator)
    rows = f.batch * (codebooks or 1)
    decoder = torch.randint(0, vocab, (rows, f.seq // 2), generator=f.generator)
    return {"labels": labels}, {"decoder_input_ids": decoder}


LATENT_FRAME_KEYS = ("audio_bos_token_id", "audio_latent_token_id", "latent_dim")
"""A TTS decoder trained on continuous latent frames (Pocket-TTS's, Gradium's) names its audio
start and frame tokens and the latent width."""


def _reads_latent_frames(f: Forward, made: Made) -> bool:
    keys = LATENT_FRAME_KEYS
    return "input_ids" in made and all(is_int(getattr(f.config, k, None)) for k in keys)


def _latent_frames(f: Forward, made: Made) -> tuple[Made, Made]:
    """Text, the audio start token closing the first half (generate's prompt ends there, as such
    a model's processor writes it), one frame token per target latent, and the target latents
    (batch, frames, latent_dim) the flow head is trained on."""
    import torch

    config, ids = f.config, made["input_ids"]
    special = [v for k, v in vars(config).items() if k.endswith("_token_id") and is_int(v)]
    plain = next(i for i in range(ids.max().item() + 2) if i not in special)
    ids = ids.masked_fill(torch.isin(ids, torch.tensor(special)), plain)
    half = ids.shape[1] // 2
    ids[:, half - 1] = config.audio_bos_token_id
    ids[:, half:] = config.audio_latent_token_id
    shape = (ids.shape[0], ids.shape[1] - half, config.latent_dim)
    return {"labels": torch.randn(*shape, generator=f.generator)}, {"input_ids": ids}


def _reads_next_tokens(f: Forward, made: Made) -> bool:
    return "input_ids" in made and not _is_classifier(f.model)


def _next_tokens(f: Forward, made: Made) -> tuple[Made, Made]:
    """Labels = the input ids, in the layout the family's recipe names ([inputs]): MusicGen's
    decoders read (batch * codebooks, seq) ids and score (batch, seq, codebooks) labels."""
    ids, config = made["input_ids"], f.config
    frames = recipe_input(config, "labels_as_frames")
    if frames is not None:  # CSM: (batch, seq, codebooks) codes below the codebook vocab_size
        return {"labels": (ids % config.vocab_size).unsqueeze(-1).repeat(1, 1, frames)}, {}
    codebooks = recipe_input(config, "labels_per_codebook")
    if codebooks is None:
        return {"labels": ids}, {}
    return {"labels": ids.reshape(-1, codebooks, ids.shape[-1]).transpose(1, 2)}, {}


CLASSIFIER_HEADS = (
    "ForSequenceClassification",
    "ForImageClassification",
    "ForTokenClassification",
    "ForQuestionAnswering",
    "ForObjectDetection",
)
"""Heads whose labels are not token ids: a VQA head scores (batch, answers) soft targets (ViLT's),
a detector per-image box dicts, an image classifier over pixel-cluster ids (ImageGPT's) one class
per image; verify trains them on their outputs."""


def _is_classifier(model: Any) -> bool:
    return any(s in type(model).__name__ for s in CLASSIFIER_HEADS)


LabelRule = tuple[
    str, Callable[[Forward, Made], bool], Callable[[Forward, Made], tuple[Made, Made]]
]

LABEL_RULES: tuple[LabelRule, ...] = (
    ("detection targets", lambda f, made: _reads_targets(f), _detection_targets),
    ("transducer", lambda f, made: _is_transducer(f), _transducer),
    ("seq2seq", _is_seq2seq, _seq2seq),
    ("latent frames", _reads_latent_frames, _latent_frames),
    ("next tokens", _reads_next_tokens, _next_tokens),
)
"""Label rules tried in order (a detector may call itself an encoder-decoder, a transducer reads
decoder ids too): (name, applies(forward, inputs made), make -> (labels, inputs changed))."""
