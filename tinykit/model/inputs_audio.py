"""Audio inputs: waveforms and log-mel features through the type's feature extractor at the tiny
front end's settings, and a codec decoder's latent frames.
"""

from __future__ import annotations

from typing import Any

from tinykit.model.processors import is_int, keep_accepted, processors, runs

SAMPLES = 16_000
"""Audio length of a waveform input: one second at 16 kHz, longer than any conv front end's field."""


def waveform_inputs(model, config, params, generator, batch) -> tuple[dict[str, Any], str]:
    import torch

    audio = torch.randn(batch, SAMPLES, generator=generator)
    for processor in processors("audio", config.model_type, config=config):
        try:
            out = processor(
                [a.numpy() for a in audio],
                sampling_rate=getattr(processor, "sampling_rate", SAMPLES),
                return_tensors="pt",
            )
            inputs = keep_accepted(out, params)
            if "input_values" in inputs:
                return inputs, f"processor {type(processor).__name__}"
        except Exception:  # the extractor wants another layout: the raw waveform instead
            pass
    # no extractor: (batch, samples) as wav2vec2 reads it, or (batch, channels, samples) as codecs
    channels: Any = getattr(config, "audio_channels", None)
    layouts = [audio, audio[:, None].expand(batch, channels if is_int(channels) else 1, SAMPLES)]
    for waveform in layouts if "input_values" in params else layouts[:1]:
        if runs(model, {"input_values": waveform.contiguous()}):
            return {"input_values": waveform.contiguous()}, "random"
    return {"input_values": audio}, "random"


LATENT_WIDTHS = ("hidden_size", "latent_dim", "codebook_dim")
"""Config keys that may name the channels of a codec decoder's latent frames."""


def latent_inputs(model, config, generator, batch) -> tuple[dict[str, Any], str]:
    """Latent frames (batch, channels, 8) in the first width of LATENT_WIDTHS the decoder reads."""
    import torch

    widths = [getattr(config, k) for k in LATENT_WIDTHS if is_int(getattr(config, k, None))]
    candidates = [torch.randn(batch, w, 8, generator=generator) for w in dict.fromkeys(widths)]
    fitting = (c for c in candidates if runs(model, {"latents": c}))
    latents = next(fitting, candidates[0] if candidates else torch.randn(batch, 32, 8))
    return {"latents": latents}, "random"


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


def _audio_node(config: Any) -> Any:
    """The config, or the sub-config of its audio tower (`encoder_config`, `audio_config`), that
    names the feature width."""
    from transformers import PretrainedConfig

    nodes = [config, *(v for v in vars(config).values() if isinstance(v, PretrainedConfig))]
    named = (n for n in nodes if any(is_int(getattr(n, k, None)) for k in FEATURE_BINS))
    return next(named, config)


def feature_inputs(model, config, params, generator, batch) -> tuple[dict[str, Any], str]:
    """Log-mel features in the layout the model reads: (batch, bins, frames) as Whisper's, or
    (batch, frames, bins) as Parakeet's; Whisper-style encoders need exactly 2 x
    max_source_positions frames."""
    import torch

    node = _audio_node(config)
    bins = next((getattr(node, k) for k in FEATURE_BINS if is_int(getattr(node, k, None))), 80)
    positions: Any = getattr(node, "max_source_positions", None)
    frames = 2 * positions if is_int(positions) else FRAMES
    window: Any = getattr(node, "n_window", None)  # chunked attention: whole chunks of 2 x n_window
    if not is_int(positions) and is_int(window) and window > 0:
        frames = -(-frames // (2 * window)) * 2 * window
    for processor in processors("audio", config.model_type, {"feature_size": bins}, config=node):
        hop = getattr(processor, "hop_length", 160)
        audio = torch.randn(batch, frames * hop, generator=generator)
        try:
            out = processor(
                [a.numpy() for a in audio],
                sampling_rate=getattr(processor, "sampling_rate", SAMPLES),
                return_tensors="pt",
            )
            features = out["input_features"]
        except Exception:  # the extractor wants other settings: random features instead
            continue
        if features.dim() == 3 and bins in features.shape[1:]:  # the extractor's own layout
            time_axis = 2 if features.shape[1] == bins else 1
            fitted = torch.zeros(
                *[frames if i == time_axis else n for i, n in enumerate(features.shape)]
            )
            take = min(frames, features.shape[time_axis])
            fitted.narrow(time_axis, 0, take).copy_(features.narrow(time_axis, 0, take))
            how = f"processor {type(processor).__name__}"
            mask = _feature_mask(params, batch, frames)
            if "attention_mask" in out and "attention_mask" in params:  # every frame is real
                mask["attention_mask"] = torch.ones(batch, frames, dtype=torch.long)
            return {"input_features": fitted, **mask}, how
    # no extractor: whichever layout the model's forward accepts, and, for front ends that
    # append deltas or stack frames (Granite Speech 5's extractor, which needs torchaudio, gives
    # mel + delta for pairs of frames: 4 x bins), whichever multiple of the bins it reads
    mask = _feature_mask(params, batch, frames)
    channels_first = torch.randn(batch, bins, frames, generator=generator)
    for width in (bins * m for m in STACKED_WIDTHS):
        wide = channels_first if width == bins else torch.randn(batch, width, frames)
        for features in (wide, wide.transpose(1, 2).contiguous()):
            if runs(model, {"input_features": features, **mask}):
                return {"input_features": features, **mask}, "random"
    return {"input_features": channels_first, **mask}, "random"


STACKED_WIDTHS = (1, 2, 4)
"""Multiples of the mel bins a feature front end may read: plain, with deltas, deltas of
stacked frame pairs."""


def _feature_mask(params: set[str], batch: int, frames: int) -> dict[str, Any]:
    """Encoders whose forward requires a frame mask beside the features (Qwen3-ASR's) get one
    that keeps every frame."""
    import torch

    key = "input_features_mask"
    return {key: torch.ones(batch, frames, dtype=torch.long)} if key in params else {}
