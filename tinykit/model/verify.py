"""verify: load a tiny model folder and prove it works (forward, backward, generate, reload).

The report also names the block types kept (`block_types`), read off the built modules, so a
test can compare them with the source's structure built at full depth on the meta device.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tinykit._progress import stage
from tinykit.errors import TinyArtifactInvalid
from tinykit.model.load import ModelFolder, one_line, open_model_folder

BATCH, SEQ = 2, 16


@dataclass
class VerifyReport:
    """What `verify` checked; `ok` is False when any problem was found."""

    path: str
    model_class: str = ""
    params: int = 0
    bytes: int = 0
    weight_bytes: int = 0
    """Bytes of the parameters, held to the size budget of a tiny model (see model/size.py)."""
    loss: float | None = None
    grads: str = ""
    generated: bool | None = None
    reload_equal: bool | None = None
    block_types: dict[str, list[str]] = field(default_factory=dict)
    tokenizer: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_if_failed(self) -> None:
        """Raise TinyArtifactInvalid (one line, every problem) unless the report is ok."""
        if self.problems:
            raise TinyArtifactInvalid(
                f"{self.path} failed verification: {'; '.join(p.rstrip('.') for p in self.problems)}. "
                f"Rebuild it with `tinykit make-tiny`, or fix the file named.",
                report=self.to_dict(),
            )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def verify(
    path: str | Path, *, raise_on_failure: bool = False, trust_remote_code: bool = False
) -> VerifyReport:
    """Load the model in `path`, run forward + backward (finite loss), generate (generative models),
    and reload it to check the logits are identical. Raises TinyArtifactInvalid if asked to.

    A folder with its own model code (``auto_map`` and a model_type transformers lacks) loads
    only with ``trust_remote_code=True``; without it, an UnsupportedModelError says so before
    any of that code runs."""
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder = open_model_folder(path, trust_remote_code=trust_remote_code)
    report = VerifyReport(str(folder.path), model_class=folder.class_name)
    report.bytes = sum(p.stat().st_size for p in folder.path.iterdir() if p.is_file())
    stage(f"checks: loading {folder.path} with {report.model_class}")
    try:
        model = folder.load()
    except TinyArtifactInvalid as e:
        report.problems.append(getattr(e, "problem", str(e)))
        return _finish(report, raise_on_failure)
    report.params = sum(p.numel() for p in model.parameters())
    report.block_types = block_types(model)
    _size(model, folder.path, report)
    generator = torch.Generator().manual_seed(0)
    try:
        inputs, labels = make_inputs(model, generator)
    except Exception as e:  # a vision tower that fails on sample pixels is a finding too
        report.problems.append(f"sample inputs cannot be made: {one_line(e)}")
        return _finish(report, raise_on_failure)
    stage("checks: forward + backward, generate, reload, tokenizer")
    _train_step(model, inputs, labels, report)
    _generate(model, inputs, report)
    _reload(model, folder, inputs, report)
    _tokenizer(model, folder.path, inputs, report, bool(folder.own_code))
    return _finish(report, raise_on_failure)


def _finish(report: VerifyReport, raise_on_failure: bool) -> VerifyReport:
    if raise_on_failure:
        report.raise_if_failed()
    return report


def _size(model: Any, folder: Path, report: VerifyReport) -> None:
    """Dimensions the build spec does not explain, and weights over the budget, are problems."""
    from tinykit.model.provenance import read_manifest
    from tinykit.model.size import size_problems, weight_bytes
    from tinykit.model.spec import ShrinkSpec

    manifest = read_manifest(folder) or {}
    report.weight_bytes = weight_bytes(model)
    if "spec" not in manifest:  # not a make-tiny build (a real-width slice, say): no tiny budget
        return
    spec = ShrinkSpec.from_kwargs(**manifest["spec"])
    report.problems += size_problems(model, spec)


def make_inputs(model: Any, generator: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Random inputs shaped from the config: token ids, pixels or audio features, plus labels."""
    import torch

    from tinykit.model.inputs import media_inputs, side_token_inputs
    from tinykit.model.inputs_declared import declared_inputs
    from tinykit.model.inputs_image import image_position_inputs, image_token, image_token_ids

    config = model.config
    params = inspect.signature(model.forward).parameters
    text = config.get_text_config(decoder=True)
    vocab = getattr(text, "vocab_size", None) or 64
    ids = torch.randint(0, vocab, (BATCH, _sequence_length(config)), generator=generator)
    inputs: dict[str, Any] = {}
    main = model.main_input_name
    media, _ = media_inputs(model, generator, BATCH)  # pixels, frames or audio, via the processor
    inputs.update(media)
    inputs.update(side_token_inputs(model, generator, BATCH, SEQ))
    media = {**inputs}  # the Q-Former's instruction ids go with the pixels (InstructBLIP's)
    if "input_ids" in params and main != "input_features":
        if media and "pixel_values" in media:  # one image token per feature of the vision tower
            ids = image_token_ids(model, media, ids)
            ids, masks = image_position_inputs(model, media, ids)
            inputs.update(masks)
            if "mm_token_type_ids" in params:  # M-RoPE models mark which positions are image
                token = image_token(config)  # (none: a default without image tokens, MiniCPM-V's)
                inputs["mm_token_type_ids"] = (ids == (-1 if token is None else token)).long()
        inputs["input_ids"] = ids
    # what else the forward requires: recipe-declared tensors (boxes, states), embeddings
    inputs.update(declared_inputs(model, inputs, generator, BATCH, ids.shape[1]))
    labels: dict[str, Any] = {}
    if "return_loss" in params:
        labels["return_loss"] = True
    # (a zero-shot detector's classes are phrases of its text, which random ids have none of:
    # Grounding DINO trains on its outputs)
    elif "labels" in params and _reads_targets(params["labels"]) and "input_ids" not in params:
        pixels = media.get("pixel_values")
        side = tuple(pixels.shape[-2:]) if pixels is not None else (32, 32)
        labels["labels"] = _detection_targets(config, side, generator)
    elif "labels" in params and _is_transducer(config, params):
        labels["labels"], inputs["decoder_input_ids"] = _transducer_labels(config, vocab, generator)
    elif (
        "labels" in params
        and getattr(config, "is_encoder_decoder", False)
        and not _is_classifier(model)  # a detector's labels are boxes (Grounding DINO's)
    ):
        # a multi-codebook decoder (MusicGen's) reads (batch * codebooks, seq) token rows and is
        # trained on (batch, seq, codebooks) labels
        codebooks = getattr(text, "num_codebooks", None)
        per_step = (codebooks,) if isinstance(codebooks, int) else ()
        labels["labels"] = torch.randint(
            0, vocab, (BATCH, SEQ // 2, *per_step), generator=generator
        )
        inputs["decoder_input_ids"] = torch.randint(
            0, vocab, (BATCH * (codebooks or 1), SEQ // 2), generator=generator
        )
    elif "labels" in params and "input_ids" in inputs and _reads_latent_frames(config):
        inputs["input_ids"], labels["labels"] = _latent_frames(config, ids, generator)
    elif "labels" in params and "input_ids" in inputs and not _is_classifier(model):
        labels["labels"] = _labels_like(config, ids)
    return inputs, labels


def _reads_targets(param: inspect.Parameter) -> bool:
    """Labels annotated as a list of dicts: a detector's per-image targets (DETR's, RT-DETR's),
    not token ids, even where the config calls the model an encoder-decoder."""
    return "list[dict" in str(param.annotation)


def _detection_targets(config: Any, side: tuple[int, ...], generator: Any) -> list[dict[str, Any]]:
    """Two objects per image: class ids below num_labels, boxes as (cx, cy, w, h) in (0, 1), and
    masks at the image's size (instance segmentation heads, RF-DETR's, score them)."""
    import torch

    classes = max(1, getattr(config, "num_labels", 1) or 1)
    targets = []
    for _ in range(BATCH):
        centers = torch.rand(2, 2, generator=generator) * 0.5 + 0.25
        sides = torch.rand(2, 2, generator=generator) * 0.4 + 0.1
        labels = torch.randint(0, classes, (2,), generator=generator)
        masks = (torch.rand(2, *side, generator=generator) > 0.5).float()
        boxes = torch.cat([centers, sides], dim=1)
        targets.append({"class_labels": labels, "boxes": boxes, "masks": masks})
    return targets


def _is_transducer(config: Any, params: Any) -> bool:
    """An RNN-T/TDT model: a blank token and a prediction network read decoder_input_ids."""
    blank = getattr(config, "blank_token_id", None)
    return isinstance(blank, int) and "decoder_input_ids" in params


def _transducer_labels(config: Any, vocab: int, generator: Any) -> tuple[Any, Any]:
    """Labels of SEQ // 2 non-blank, non-pad tokens and the prediction network's input: the
    blank (start) token, then the labels (its joint output scores U + 1 label positions)."""
    import torch

    reserved = {getattr(config, k, None) for k in ("blank_token_id", "pad_token_id")}
    allowed = torch.tensor([i for i in range(vocab) if i not in reserved])
    picks = torch.randint(0, len(allowed), (BATCH, SEQ // 2), generator=generator)
    labels = allowed[picks]
    start = torch.full((BATCH, 1), config.blank_token_id, dtype=torch.long)
    return labels, torch.cat([start, labels], dim=1)


LATENT_FRAME_KEYS = ("audio_bos_token_id", "audio_latent_token_id", "latent_dim")
"""A TTS decoder trained on continuous latent frames (Pocket-TTS's, Gradium's) names its audio
start and frame tokens and the latent width."""


def _reads_latent_frames(config: Any) -> bool:
    return all(isinstance(getattr(config, k, None), int) for k in LATENT_FRAME_KEYS)


def _latent_frames(config: Any, ids: Any, generator: Any) -> tuple[Any, Any]:
    """Text, the audio start token closing the first half (generate's prompt ends there, as such
    a model's processor writes it), one frame token per target latent, and the target latents
    (batch, frames, latent_dim) the flow head is trained on."""
    import torch

    special = [v for k, v in vars(config).items() if k.endswith("_token_id") and isinstance(v, int)]
    plain = next(i for i in range(ids.max().item() + 2) if i not in special)
    ids = ids.masked_fill(torch.isin(ids, torch.tensor(special)), plain)
    half = ids.shape[1] // 2
    ids[:, half - 1] = config.audio_bos_token_id
    ids[:, half:] = config.audio_latent_token_id
    frames = torch.randn(ids.shape[0], ids.shape[1] - half, config.latent_dim, generator=generator)
    return ids, frames


def _recipe_input(config: Any, name: str) -> int | None:
    """The config value an [inputs] entry of the family's recipe names, e.g. the
    `sequence_length = "max_position_embeddings"` of a model that reads fixed-length text."""
    from tinykit.model.recipes import recipe_for

    key = recipe_for(getattr(config, "model_type", "") or "").inputs.get(name)
    value = getattr(config, str(key), None) if key else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _sequence_length(config: Any) -> int:
    """SEQ tokens, or the fixed length a family reads (Perceiver's decoder queries every one of
    max_position_embeddings positions, so its labels must be that long too)."""
    return _recipe_input(config, "sequence_length") or SEQ


def _labels_like(config: Any, ids: Any) -> Any:
    """Labels = the input ids, in the layout the family's recipe names ([inputs]): MusicGen's
    decoders read (batch * codebooks, seq) ids and score (batch, seq, codebooks) labels."""
    frames = _recipe_input(config, "labels_as_frames")
    if frames is not None:  # CSM: (batch, seq, codebooks) codes below the codebook vocab_size
        return (ids % config.vocab_size).unsqueeze(-1).repeat(1, 1, frames)
    codebooks = _recipe_input(config, "labels_per_codebook")
    if codebooks is None:
        return ids
    return ids.reshape(-1, codebooks, ids.shape[-1]).transpose(1, 2)


def _is_classifier(model: Any) -> bool:
    return any(
        s in type(model).__name__
        # (a VQA head scores (batch, answers) soft targets, ViLT's; a detector's labels are
        # per-image box dicts, not token ids: it trains on its outputs)
        for s in (
            "ForSequenceClassification",
            "ForTokenClassification",
            "ForQuestionAnswering",
            "ForObjectDetection",
        )
    )


def _train_step(model: Any, inputs: dict, labels: dict, report: VerifyReport) -> None:
    # a train-mode forward moves BatchNorm's running statistics: put them back afterwards, so
    # the model still equals the saved weights for the reload comparison
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    try:
        _train_forward_backward(model, inputs, labels, report)
    finally:
        with _no_grad():
            for name, buffer in model.named_buffers():
                # a table regrown to the input's length (Seamless M4T's sinusoidal positions) is
                # recomputed, not trained: it stays
                if name in buffers and buffer.shape == buffers[name].shape:
                    buffer.copy_(buffers[name])


def _no_grad() -> Any:
    import torch

    return torch.no_grad()


def _train_forward_backward(model: Any, inputs: dict, labels: dict, report: VerifyReport) -> None:
    model.train()
    try:
        out = model(**inputs, **labels)
    except Exception as e:  # any model failure is a verification finding, reported as such
        report.problems.append(f"forward failed: {one_line(e)}")
        return
    if getattr(out, "loss", None) is None and next(_float_tensors(out), None) is None:
        report.problems.append(
            "forward returned no floating-point output (integer codes only): nothing to train"
        )
        return
    loss = (
        out.loss
        if getattr(out, "loss", None) is not None
        else _without_masked(_differentiable(out).float()).pow(2).mean()
    )
    loss = loss.mean()  # a per-sample loss (DAC's) is averaged over the batch
    report.loss = float(loss.detach())
    if not math.isfinite(report.loss):
        report.problems.append(f"loss is not finite ({report.loss})")
        return
    loss.backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    with_grad = sum(1 for p in trainable if p.grad is not None)
    report.grads = f"{with_grad}/{len(trainable)} parameter tensors got a gradient"
    if with_grad == 0:
        report.problems.append("backward gave no gradient to any parameter")
    model.zero_grad(set_to_none=True)


def _without_masked(x: Any) -> Any:
    """Logits masked to -inf by design (Grounding DINO's beyond the text's tokens) left out of
    the stand-in loss; NaN and +inf still make it non-finite."""
    return x.masked_fill(x == float("-inf"), 0.0)


def _first_tensor(out: Any) -> Any:
    return next(_float_tensors(out))


def _differentiable(out: Any) -> Any:
    """The first output the weights have a gradient path to (SuperPoint returns its keypoint
    coordinates, which have none, before its scores)."""
    tensors = list(_float_tensors(out))
    # (and finite: Grounding DINO's logits are -inf at masked text positions)
    finite = [t for t in tensors if t.requires_grad and bool(t.isfinite().all())]
    return next(iter(finite), next((t for t in tensors if t.requires_grad), tensors[0]))


def _seeded(model: Any, inputs: dict) -> Any:
    import torch

    torch.manual_seed(0)
    return model(**inputs)


def _float_tensors(out: Any) -> Any:
    """Floating tensors of a model output in order, nested tuples and outputs included (MGP-STR
    returns its logits as a tuple of three heads)."""
    import torch
    from transformers.cache_utils import Cache

    if isinstance(out, torch.Tensor):
        if out.is_floating_point():
            yield out
        return
    if isinstance(out, Cache):  # the KV cache a forward returns is no output to train
        return
    values = out.values() if hasattr(out, "values") else out
    if isinstance(values, str) or not hasattr(values, "__iter__"):
        return
    for value in values:
        yield from _float_tensors(value)


def _generate(model: Any, inputs: dict, report: VerifyReport) -> None:
    # Text generation only: speech models (Whisper) need a real tokenizer's timestamp layout.
    if not model.can_generate() or model.main_input_name != "input_ids":
        return
    model.eval()
    try:
        import torch

        # half the sequence as the prompt: prompt + new tokens stay within the trained length
        prompt = {  # image tokens stay in front of the prompt
            k: v[:, : v.shape[1] - SEQ // 2] if k in ("input_ids", "mm_token_type_ids") else v
            for k, v in inputs.items()
            if not k.startswith("decoder_")
        }
        with torch.no_grad():
            # num_return_sequences: MusicGen's own generate reads it before transformers fills
            # in its default (1)
            model.generate(**prompt, max_new_tokens=2, do_sample=False, num_return_sequences=1)
        report.generated = True
    except Exception as e:  # reported, not raised: verify lists every failure at once
        report.generated = False
        report.problems.append(f"generate failed: {one_line(e)}")


def _reload(model: Any, folder: ModelFolder, inputs: dict, report: VerifyReport) -> None:
    import torch

    model.eval()
    try:
        again = folder.cls.from_pretrained(folder.path, **folder.load_options).eval()
        with torch.no_grad():  # the same seed for both: ViT-MAE masks patches at random
            a = _first_tensor(_seeded(model, inputs))
            b = _first_tensor(_seeded(again, inputs))
        report.reload_equal = bool(torch.equal(a, b))
    except Exception as e:  # reported, not raised
        report.problems.append(f"reload and forward failed: {one_line(e)}")
        return
    if not report.reload_equal:
        report.problems.append("logits after reload differ from the saved model's")


def _tokenizer(model: Any, folder: Path, inputs: dict, report: VerifyReport, trust: bool) -> None:
    """Check the tokenizer shipped beside the model, then run the model on its encoding of the probe."""
    import torch
    from transformers import AutoTokenizer

    from tinykit.model.inputs_declared import declared_inputs
    from tinykit.tokenizer.check import PROBE, check_tokenizer, encode
    from tinykit.tokenizer.source import has_tokenizer_files

    if not has_tokenizer_files(folder):
        vocab = getattr(model.config.get_text_config(decoder=True), "vocab_size", None)
        # BEiT's vocabulary is of visual tokens: only a model that reads token ids needs text
        if (
            vocab is not None and "input_ids" in inputs
        ):  # it reads token ids, and a test has nothing to encode text with
            report.problems.append(
                f"no tokenizer beside the model, which reads token ids (vocab_size {vocab}): the "
                "folder has no tokenizer.json, vocab files or tokenizer model. Copy the source's "
                "tokenizer files into it, or build it with make-tiny --tokenizer SOURCE"
            )
        return
    report.tokenizer = check_tokenizer(folder, trust_remote_code=trust)
    report.problems += [f"tokenizer: {p}" for p in report.tokenizer.get("problems", [])]
    if "input_ids" not in inputs:
        return
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust)
    ids = encode(tok, PROBE, return_tensors="pt")["input_ids"]
    ids = ids[
        :, : getattr(model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    ]
    try:
        with torch.no_grad():
            probe = _probe_inputs(model, inputs, ids.repeat(BATCH, 1))
            # declared per-token tensors (boxes) follow the probe's length
            again = declared_inputs(
                model, {"input_ids": ids}, torch.Generator(), BATCH, ids.shape[1]
            )
            probe.update({k: v for k, v in again.items() if k in probe})
            logits = _first_tensor(model(**probe))
        report.tokenizer["forward"] = {
            "tokens": ids.shape[1],
            "finite": bool(torch.isfinite(logits).all()),
        }
    except Exception as e:  # reported, not raised
        report.problems.append(
            f"forward pass on the tokenizer's encoding of the probe failed: {one_line(e)}"
        )


def _probe_inputs(model: Any, inputs: dict, ids: Any) -> dict:
    """The sample inputs with the probe's ids for text: images that go with image tokens are
    dropped (the probe holds none) unless the forward requires them (BLIP-2's), and then, as
    where masks place the image features (Kosmos-2's, IDEFICS's), placed in front of the probe."""
    from tinykit.model.inputs_image import image_position_inputs, image_token_ids

    params = inspect.signature(model.forward).parameters
    required = {n for n, p in params.items() if p.default is p.empty}
    placed = {k for k in ("image_embeds_position_mask", "image_attention_mask") if k in inputs}
    out = {
        k: v
        for k, v in inputs.items()
        if k not in placed and (k in required or not _is_image_input(model, k))
    }
    if "pixel_values" in out and (placed or "pixel_values" in required):
        ids = image_token_ids(model, out, ids)
        ids, masks = image_position_inputs(model, out, ids)
        out.update(masks)
    return {**out, "input_ids": ids}


def _is_image_input(model: Any, key: str) -> bool:
    """Pixels that go with image tokens: a text of the tokenizer's alone holds none."""
    from tinykit.model.inputs_image import image_token

    return image_token(model.config) is not None and key.startswith(("pixel_", "image_"))


def block_types(model: Any) -> dict[str, list[str]]:
    """The distinct layer kinds of every layer stack: class, child classes and attention type."""
    import torch

    stacks: dict[str, list[str]] = {}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.ModuleList) or not len(module):
            continue
        layers = [layer for layer in module if layer is not None]  # Informer's empty slots
        if not layers or not all(len(list(layer.children())) > 1 for layer in layers):
            continue  # a list of plain tensors-holders (experts, norms), not a layer stack
        stack = re.sub(r"\.\d+(?=\.|$)", ".*", name)  # T5's per-block lists form one stack
        stacks[stack] = sorted(
            set(stacks.get(stack, [])) | {_layer_kind(layer) for layer in layers}
        )
    return stacks


def _layer_kind(layer: Any) -> str:
    children = ",".join(f"{n}:{type(c).__name__}" for n, c in layer.named_children())
    attention = next(
        (
            getattr(m, a)
            for m in (layer, *layer.children())
            for a in ("layer_type", "attention_type")
            if isinstance(getattr(m, a, None), str)
        ),
        None,
    )
    if attention is None and any(
        getattr(m, "is_sliding", False) is True for m in (layer, *layer.children())
    ):
        attention = "sliding"
    return f"{type(layer).__name__}({children})" + (f"[{attention}]" if attention else "")
