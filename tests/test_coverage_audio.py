"""Audio-group coverage fixes that the sampled sweep in test_coverage_groups.py does not reach:
time-series forecasters (a recipe-given horizon, lagged history inputs) and the set-apart check
for a class without a forward of its own."""

from __future__ import annotations

from tinykit.coverage.apart import upstream_error
from tinykit.coverage.sweep import sweep
from tinykit.model.size import MULTIMODAL_BUDGET


def test_a_forecaster_with_a_recipe_horizon_passes_on_history_and_future_inputs(coverage_classes):
    [row] = sweep(["time_series_transformer"], coverage_classes)
    assert row.ok, row.reason
    assert 0 < row.weight_bytes <= MULTIMODAL_BUDGET


def test_a_class_without_its_own_forward_is_transformers_failure_at_full_size():
    error = upstream_error("bark", "BarkModel")
    assert error is not None and error.startswith("forward: NotImplementedError")
    assert 'missing the required "forward" function' in error
    # a codec with a forward of its own that reads no token ids builds and is not called
    assert upstream_error("encodec", "EncodecModel") is None


def test_a_forward_on_token_ids_alone_proves_nothing_of_a_model_that_reads_more():
    # CLAP reads audio features beside its text: at full size a forward on token ids alone fails
    # for want of them, as a tiny model that was given none would; that is tinykit's failure
    assert upstream_error("clap", "ClapModel") is None
    # a text model whose own default fails at full size on token ids is still set apart
    error = upstream_error("gemma4_unified_assistant")
    assert error is not None and error.startswith("forward: ValueError")


def test_a_forward_that_runs_under_inference_mode_is_set_apart_as_untrainable():
    # SAM 3's video tracker steps an inference session under @torch.inference_mode(): no input
    # makes a loss of its outputs trainable
    error = upstream_error("sam3_tracker_video", "Sam3TrackerVideoModel")
    assert error is not None and "torch.inference_mode" in error
    # its image tracker (what the mask-generation table builds for SAM 2's video type) trains
    assert upstream_error("sam2_video", "Sam2Model") is None
