"""Time-series inputs: a forecaster's lagged history, its masks and time features, and the
future window its decoder is trained on (TimeSeriesTransformer's, Informer's, PatchTST's)."""

from __future__ import annotations

from typing import Any

from tinykit._values import is_int
from tinykit.model.inputs.forward import Forward


def reads_series(f: Forward) -> bool:
    return "past_values" in f.params


def series_inputs(f: Forward) -> dict[str, Any]:
    """The history (context plus its largest lag), its observed mask, time features and static
    features, and the future window, each where the forward reads it."""
    import torch

    config, batch, generator = f.config, f.batch, f.generator

    def setting(name: str) -> int:
        value = getattr(config, name, 0)
        return value if is_int(value) else 0

    lags = getattr(config, "lags_sequence", None) or [0]
    past = setting("context_length") + max(lags)
    future = setting("prediction_length")
    variates = setting("input_size")
    per_step = (variates,) if variates > 1 else ()  # one variate: no trailing axis
    if setting("num_input_channels"):  # PatchTST's (batch, steps, channels), one channel too
        per_step = (setting("num_input_channels"),)
    times = setting("num_time_features")
    inputs = {
        "past_values": torch.randn(batch, past, *per_step, generator=generator),
        "past_observed_mask": torch.ones(batch, past, *per_step),
        "past_time_features": torch.randn(batch, past, times, generator=generator),
        "future_values": torch.randn(batch, future, *per_step, generator=generator),
        "future_time_features": torch.randn(batch, future, times, generator=generator),
    }
    if setting("num_static_categorical_features"):
        cardinality = min(getattr(config, "cardinality", None) or [1])
        shape = (batch, setting("num_static_categorical_features"))
        inputs["static_categorical_features"] = torch.randint(
            0, max(1, cardinality), shape, generator=generator
        )
    if setting("num_static_real_features"):
        shape = (batch, setting("num_static_real_features"))
        inputs["static_real_features"] = torch.randn(*shape, generator=generator)
    return {k: v for k, v in inputs.items() if k in f.params}
