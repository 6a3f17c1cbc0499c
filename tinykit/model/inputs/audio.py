"""Audio inputs: waveforms and log-mel features through the type's feature extractor at the tiny
front end's settings, and a codec decoder's latent frames.
"""

from __future__ import annotations

from typing import Any

from tinykit._values import is_int
from tinykit.frontend.processor_files import fit_audio_window
from tinykit.frontend.processors import processors
from tinykit.model.inputs.forward import Forward, keep_accepted, runs

SAMPLES = 16_000
"""Audio length of a waveform input: one second at 16 kHz, longer than any conv front end's field."""


def reads_waveform(f: Forward) -> bool:
    """A waveform: the main input, the only audio beside no token ids, or required beside token
    ids (PE Audio's forward requires both)."""
    names = f.names
    return (
        f.main == "input_values"
        or ("input_values" in names and "input_ids" not in names)
        or "input_values" in f.required
    )


def waveform_inputs(f: Forward) -> dict[str, Any]:
    import torch

    audio = torch.randn(f.batch, SAMPLES, generator=f.generator)
    extracted = _waveform_extractor(f, audio)
    if extracted is not None:
        return extracted[1]
    # no extractor: (batch, samples) as wav2vec2 reads it, or (batch, channels, samples) as codecs
    channels: Any = getattr(f.config, "audio_channels", None)
    mono = audio[:, None].expand(f.batch, channels if is_int(channels) else 1, SAMPLES)
    layouts = [audio, mono] if "input_values" in f.params else [audio]
    for waveform in layouts:
        if runs(f.model, {"input_values": waveform.contiguous()}):
            return {"input_values": waveform.contiguous()}
    return {"input_values": audio}


def _waveform_extractor(f: Forward, audio: Any) -> tuple[Any, dict[str, Any]] | None:
    """The type's extractor that makes the forward's `input_values` of `audio`, and its output."""
    for processor in processors("audio", f.config.model_type, config=f.config):
        try:
            out = processor(
                [a.numpy() for a in audio],
                sampling_rate=getattr(processor, "sampling_rate", SAMPLES),
                return_tensors="pt",
            )
            inputs = keep_accepted(out, f.names)
            if "input_values" in inputs:
                return processor, inputs
        except Exception:  # the extractor wants another layout: the raw waveform instead
            pass
    return None


def audio_extractor(f: Forward) -> tuple[Any, dict[str, Any]] | None:
    """The feature extractor the input maker feeds a waveform or log-mel forward through, and
    what it made of random audio; None where the type has none that fits. make-tiny ships it."""
    import torch

    if reads_waveform(f):
        return _waveform_extractor(f, torch.randn(f.batch, SAMPLES, generator=f.generator))
    if "input_features" not in f.params:
        return None
    node = _audio_node(f.config)
    return _extracted_features(f, node, _bins(node), _frames(node))


def waveform_and_features(f: Forward) -> dict[str, Any]:
    """A waveform and, beside it, the log-mel features a semantic encoder reads, one frame per
    hop of the codec (`hop_length`), in the layouts the forward accepts. X-Codec 2's extractor,
    which makes both, needs torchaudio."""
    import torch

    bins = _bins(_audio_node(f.config))
    hop: Any = getattr(f.config, "hop_length", None)
    frames = SAMPLES // hop if is_int(hop) and hop > 0 else FRAMES
    audio = torch.randn(f.batch, SAMPLES, generator=f.generator)
    features = torch.randn(f.batch, frames, bins, generator=f.generator)
    candidates = [
        {"input_values": w, "input_features": x}
        for w in (audio[:, None], audio)
        for x in (features, features.transpose(1, 2).contiguous())
    ]
    return next((c for c in candidates if runs(f.model, c)), candidates[0])


LATENT_WIDTHS = ("hidden_size", "latent_dim", "codebook_dim")
"""Config keys that may name the channels of a codec decoder's latent frames."""


def latent_inputs(f: Forward) -> dict[str, Any]:
    """Latent frames (batch, channels, 8) in the first width of LATENT_WIDTHS the decoder reads."""
    import torch

    config = f.config
    widths = [getattr(config, k) for k in LATENT_WIDTHS if is_int(getattr(config, k, None))]
    candidates = [torch.randn(f.batch, w, 8, generator=f.generator) for w in dict.fromkeys(widths)]
    fitting = (c for c in candidates if runs(f.model, {"latents": c}))
    latents = next(fitting, candidates[0] if candidates else torch.randn(f.batch, 32, 8))
    return {"latents": latents}


FEATURE_BINS = (
    "input_size",
    "num_mel_bins",
    "feature_size",
    "input_feat_per_channel",
    "feature_projection_input_dim",
)
"""Config keys naming the feature width of a log-mel front end: stacked frames (FunASR's
`input_size`, mel bins x frames per step) before plain mel bins."""

FRAMES = 64
"""Mel frames (0.64 s) for an encoder without a fixed window: past any subsampling stack's field."""

STACKED_WIDTHS = (1, 2, 4)
"""Multiples of the mel bins a feature front end may read: plain, with deltas, deltas of
stacked frame pairs."""


def _audio_node(config: Any) -> Any:
    """The config, or the sub-config of its audio tower (`encoder_config`, `audio_config`), that
    names the feature width."""
    from transformers import PretrainedConfig

    nodes = [config, *(v for v in vars(config).values() if isinstance(v, PretrainedConfig))]
    named = (n for n in nodes if any(is_int(getattr(n, k, None)) for k in FEATURE_BINS))
    return next(named, config)


def _bins(node: Any) -> int:
    return next((getattr(node, k) for k in FEATURE_BINS if is_int(getattr(node, k, None))), 80)


def _frames(node: Any) -> int:
    """Whisper-style encoders need exactly 2 x max_source_positions frames; chunked attention
    (Qwen3-ASR's `n_window`) whole chunks of 2 x n_window."""
    positions: Any = getattr(node, "max_source_positions", None)
    if is_int(positions):
        return 2 * positions
    window: Any = getattr(node, "n_window", None)
    if is_int(window) and window > 0:
        return -(-FRAMES // (2 * window)) * 2 * window
    return FRAMES


def feature_inputs(f: Forward) -> dict[str, Any]:
    """Log-mel features in the layout the model reads: (batch, bins, frames) as Whisper's, or
    (batch, frames, bins) as Parakeet's; through the extractor where it builds, else random."""
    node = _audio_node(f.config)
    bins, frames = _bins(node), _frames(node)
    extracted = _extracted_features(f, node, bins, frames)
    return extracted[1] if extracted is not None else _random_features(f, bins, frames)


def _extracted_features(
    f: Forward, node: Any, bins: int, frames: int
) -> tuple[Any, dict[str, Any]] | None:
    """The extractor, and its features of random audio cut or padded to `frames` in its own
    layout."""
    import torch

    for built in processors("audio", f.config.model_type, {"feature_size": bins}, config=node):
        processor = _windowed(built, node)
        hop = getattr(processor, "hop_length", 160)
        audio = torch.randn(f.batch, frames * hop, generator=f.generator)
        try:
            out = processor(
                [a.numpy() for a in audio],
                sampling_rate=getattr(processor, "sampling_rate", SAMPLES),
                return_tensors="pt",
            )
            features = out["input_features"]
        except Exception:  # the extractor wants other settings: random features instead
            continue
        if features.dim() != 3 or bins not in features.shape[1:]:
            continue
        time_axis = 2 if features.shape[1] == bins else 1
        fitted = torch.zeros(
            *[frames if i == time_axis else n for i, n in enumerate(features.shape)]
        )
        take = min(frames, features.shape[time_axis])
        fitted.narrow(time_axis, 0, take).copy_(features.narrow(time_axis, 0, take))
        mask = _feature_mask(f, frames)
        if "attention_mask" in out and "attention_mask" in f.params:  # every frame is real
            mask["attention_mask"] = torch.ones(f.batch, frames, dtype=torch.long)
        return processor, {"input_features": fitted, **mask}
    return None


def _windowed(processor: Any, node: Any) -> Any:
    """A Whisper-style extractor rebuilt to pad every clip to the tiny encoder's window."""
    data = processor.to_dict()
    if not fit_audio_window(data, node):
        return processor
    try:
        return type(processor).from_dict(data)
    except Exception:  # an extractor that does not take its own settings back: as it was
        return processor


def _random_features(f: Forward, bins: int, frames: int) -> dict[str, Any]:
    """Whichever layout the forward accepts, and, for front ends that append deltas or stack
    frames (Granite Speech 5's extractor, which needs torchaudio, gives mel + delta for pairs of
    frames: 4 x bins), whichever multiple of the bins it reads."""
    import torch

    mask = _feature_mask(f, frames)
    channels_first = torch.randn(f.batch, bins, frames, generator=f.generator)
    for width in (bins * m for m in STACKED_WIDTHS):
        wide = (
            channels_first
            if width == bins
            else torch.randn(f.batch, width, frames, generator=f.generator)
        )
        for features in (wide, wide.transpose(1, 2).contiguous()):
            if runs(f.model, {"input_features": features, **mask}):
                return {"input_features": features, **mask}
    return {"input_features": channels_first, **mask}


def _feature_mask(f: Forward, frames: int) -> dict[str, Any]:
    """Encoders whose forward requires a frame mask beside the features (Qwen3-ASR's) get one
    that keeps every frame."""
    import torch

    key = "input_features_mask"
    return {key: torch.ones(f.batch, frames, dtype=torch.long)} if key in f.params else {}
