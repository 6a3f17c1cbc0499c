"""ShrinkSpec bounds, and the property that any spec within them builds or fails cleanly."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from _hub_files import NATIVE, repo_id
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tinykit.errors import ShrinkConstraintError, TinykitError
from tinykit.model.build import make_tiny
from tinykit.model.spec import ShrinkOptions, ShrinkSpec


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"hidden": 30}, "hidden"),
        ({"heads": 4, "kv_heads": 3}, "kv_heads"),
        ({"vocab": 10}, "vocab"),
        ({"experts": 1}, "experts"),
        ({"experts": 2, "experts_per_tok": 3}, "experts_per_tok"),
        ({"dtype": "int8"}, "dtype"),
        ({"layers": 0}, "layers"),
        ({"hidden": 12, "heads": 4}, "hidden"),
        ({"image_size": 30, "patch_size": 8}, "patch_size"),
        ({"seed": -1}, "seed"),
    ],
)
def test_out_of_bounds_values_name_the_field(kwargs, field):
    with pytest.raises(ShrinkConstraintError) as e:
        ShrinkSpec(**kwargs)
    assert e.value.field == field
    assert "\n" not in str(e.value)


def test_unknown_option_is_a_usage_error():
    with pytest.raises(ShrinkConstraintError, match="unknown shrink option"):
        ShrinkSpec.from_kwargs(hiden=32)


@st.composite
def specs(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    hidden = heads * 2 * draw(st.integers(max(1, 4 // heads), 8))  # within bounds: hidden >= 8
    experts = draw(st.integers(2, 6))
    return dict(
        hidden=hidden,
        heads=heads,
        kv_heads=draw(st.sampled_from([d for d in (1, 2, 4, 8) if heads % d == 0])),
        intermediate=draw(st.integers(4, 96)),
        # mostly at or above what byte-level tokenizers need (~325), so that most examples get
        # past the tokenizer to the model; a third below it, to hit that clean failure too
        vocab=draw(st.one_of(st.integers(330, 2048), st.integers(330, 2048), st.integers(64, 329))),
        layers=draw(st.one_of(st.just("auto"), st.integers(1, 4))),
        experts=experts,
        experts_per_tok=draw(st.integers(1, experts)),
        expert_intermediate=draw(st.integers(4, 64)),
        max_positions=draw(st.integers(32, 1024)),
        window=draw(st.integers(2, 64)),
        seed=draw(st.integers(0, 2**32 - 1)),
        dtype=draw(st.sampled_from(["float32", "bfloat16"])),
    )


# The property holds vacuously if every example fails cleanly, so a share of them must build.
# Clean failures are expected too: a hybrid source at --layers 1, a vocab below the tokenizer's
# alphabet.
MIN_BUILT_SHARE = 0.25


def test_any_spec_within_bounds_builds_a_working_model_or_fails_cleanly(tmp_path_factory):
    import torch
    import transformers

    outcomes = Counter()

    # derandomized: the share that builds depends on the draws, and a CI run must not hinge on them
    @settings(
        max_examples=30,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(folder=st.sampled_from(NATIVE), spec=specs())
    def check(folder, spec):
        out = tmp_path_factory.mktemp("prop") / "tiny"
        try:
            result = make_tiny(folder, out, **spec)
        except TinykitError as e:
            assert str(e) and "\n" not in str(e), repo_id(folder)
            assert not out.exists()
            outcomes["failed cleanly"] += 1
            event("failed cleanly")
            return
        config = json.loads((out / "config.json").read_text())
        model = getattr(transformers, config["architectures"][0]).from_pretrained(out)
        assert sum(p.numel() for p in model.parameters()) == result.params > 0
        assert {str(p.dtype) for p in model.parameters()} == {f"torch.{spec['dtype']}"}
        assert torch.device("cpu") == next(model.parameters()).device
        outcomes["built"] += 1
        event("built")

    check()
    assert outcomes["built"] >= MIN_BUILT_SHARE * sum(outcomes.values()), outcomes


def test_the_make_tiny_keywords_are_the_spec_fields():
    import dataclasses

    assert set(ShrinkOptions.__annotations__) == {f.name for f in dataclasses.fields(ShrinkSpec)}
    assert ShrinkSpec(hidden=64, seed=0).changed() == {"hidden": 64}


def test_an_odd_expert_width_is_rounded_up_so_grouped_expert_matmuls_run(tmp_path):
    # Mixtral's intermediate_size is its experts' width: at 13 float32 values (52-byte rows)
    # torch's grouped matmul failed ("strides should be multiple of 16 bytes")
    built = make_tiny("mixtral", tmp_path / "mixtral", intermediate=13)
    config = json.loads((built.path / "config.json").read_text())
    assert config["intermediate_size"] == 16
    assert config["num_local_experts"] >= 2


def test_positions_below_twice_the_rope_factor_keep_two_original_positions(tmp_path):
    # Phi-3-mini-128k's LongRoPE implies factor 32 (131072 / 4096); at 32 positions the original
    # length was cut to 1 and transformers divided by log(1) while building the model.
    from conftest import HUB_FILES

    out = make_tiny(
        HUB_FILES / "microsoft" / "Phi-3-mini-128k-instruct",
        tmp_path / "t",
        max_positions=32,
        hidden=8,
        heads=1,
        kv_heads=1,
        intermediate=4,
        vocab=330,
    )
    config = json.loads((out / "config.json").read_text())
    assert config["max_position_embeddings"] == 32
    assert config["original_max_position_embeddings"] == 2
    assert config["rope_parameters"]["factor"] == 16
