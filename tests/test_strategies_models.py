"""tinykit.strategies: shrink specs, tiny configs per model type, token batches, the CI profile."""

from __future__ import annotations

import pytest
import torch
import transformers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import HUB_FILES
from tinykit import ShrinkSpec, make_tiny
from tinykit.coverage.sweep import text_model_types, upstream_error
from tinykit.errors import UnsupportedModelError
from tinykit.model.build import class_and_config
from tinykit.model.inputs import make_inputs
from tinykit.model.recipes import recipe_for
from tinykit.strategies import shrink_specs, tiny_configs, token_batches

# Every text model type `tinykit coverage` sweeps gets tiny configs; these few also build models.
TEXT_TYPES = text_model_types()
BUILD_SAMPLE = ["bert", "falcon", "gpt2", "mixtral", "phi3", "qwen3_moe", "qwen3_next", "t5"]
# Gaps of the shrinker itself, which `tinykit coverage` reports too: some drawn sizes fail cleanly.
SHRINK_GAPS = {
    "dory": "num_hidden_layers must equal n_input + n_recurrent + n_output layers at some depths",
    "dots3_note": "the vision adapter's output width is not tied to the text width",
    "neomme": "M-RoPE needs partial_rotary_factor * head_dim to be a multiple of 4 at some widths",
}


def test_the_sweep_is_every_text_model_type():
    assert len(TEXT_TYPES) > 200 and {"llama", "t5", "bert", "phi3", "falcon"} <= set(TEXT_TYPES)
    assert set(BUILD_SAMPLE) <= set(TEXT_TYPES)


@given(shrink_specs())
def test_shrink_specs_are_valid_shrink_specs(spec):
    assert ShrinkSpec.from_kwargs(**spec).to_dict().items() >= spec.items()
    assert spec["hidden"] <= 64 and (spec["layers"] == "auto" or 1 <= spec["layers"] <= 3)


@pytest.mark.parametrize(("model_type", "min_layers"), [("qwen3_moe", 1), ("qwen3_next", 2)])
def test_make_tiny_builds_every_drawn_spec(model_type, min_layers, tmp_path_factory):
    @settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(shrink_specs(max_hidden=32, max_layers=2, min_layers=min_layers))
    def check(spec):
        path = make_tiny(model_type, tmp_path_factory.mktemp("tiny"), force=True, **spec)
        config = transformers.AutoConfig.from_pretrained(path)
        # spec sizes are upper bounds: the tiny tokenizer may need fewer ids than asked for
        assert config.hidden_size == spec["hidden"] and config.vocab_size <= spec["vocab"]

    check()


@pytest.mark.parametrize("model_type", TEXT_TYPES)
def test_tiny_configs_of_every_swept_model_type_are_tiny(model_type):
    if model_type in SHRINK_GAPS:
        pytest.xfail(SHRINK_GAPS[model_type])
    recipe = recipe_for(model_type)

    @settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(tiny_configs(model_type, max_hidden=64, max_layers=3))
    def check(config):
        assert type(config) is transformers.CONFIG_MAPPING[model_type]  # gpt-sw3 is a GPT2Config
        values = config.to_dict()
        widths = [  # a recipe may derive a wider key (zamba: 2 * hidden_size)
            values[k]
            for k in recipe.knobs["width"]
            if _is_size(values.get(k)) and k not in recipe.derive
        ]
        vocabs = [values[k] for k in recipe.knobs["vocab"] if _is_size(values.get(k))]
        assert all(w <= 64 for w in widths) and all(v <= 1024 for v in vocabs), (widths, vocabs)

    try:
        check()
    except UnsupportedModelError:
        # set apart as `tinykit coverage` does: transformers' own default config is broken
        assert upstream_error(model_type) is not None
        pytest.skip(f"transformers cannot build {model_type} from its own default config")


def _is_size(value):
    return isinstance(value, int) and not isinstance(value, bool)


@pytest.mark.parametrize("model_type", BUILD_SAMPLE)
def test_tiny_configs_build_models_that_train(model_type):
    @settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(tiny_configs(model_type))
    def check(config):
        cls, config = class_and_config({"model_type": model_type}, config, name=model_type)
        model = cls._from_config(config)
        assert sum(p.numel() for p in model.parameters()) < 2_000_000
        made = make_inputs(model, labels=True)
        out = model(**made.forward, **made.labels)
        assert torch.isfinite(out.loss)
        out.loss.backward()

    check()


@settings(max_examples=1)
@given(st.data())
def test_tiny_configs_reject_an_unknown_model_type(data):
    with pytest.raises(UnsupportedModelError, match="'kimi_k2' is not in this transformers"):
        data.draw(tiny_configs("kimi_k2"))


@pytest.fixture(scope="module")
def tokenizers():
    gpt2 = transformers.AutoTokenizer.from_pretrained(HUB_FILES / "openai-community" / "gpt2-xl")
    bert_folder = HUB_FILES / "google-bert" / "bert-base-uncased"
    bert = transformers.AutoTokenizer.from_pretrained(bert_folder)
    bert_left = transformers.AutoTokenizer.from_pretrained(bert_folder, padding_side="left")
    return {"gpt2 (no pad token)": gpt2, "bert": bert, "bert left": bert_left}


@pytest.mark.parametrize("name", ["gpt2 (no pad token)", "bert", "bert left"])
def test_token_batches_are_padded_masked_and_labelled(tokenizers, name):
    tok = tokenizers[name]
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    @settings(max_examples=30, deadline=None)
    @given(token_batches(tok, max_batch=3, max_len=6, as_tensors=True))
    def check(batch):
        ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        assert ids.shape == mask.shape == labels.shape and ids.dtype == torch.long
        assert bool((ids < len(tok)).all()) and bool((mask.sum(1) >= 1).all())
        assert torch.equal(labels == -100, mask == 0)
        assert bool((ids[mask == 0] == pad_id).all()) and not bool((ids[mask == 1] == pad_id).any())
        first_col = mask[:, 0] if tok.padding_side == "right" else mask[:, -1]
        assert bool((first_col == 1).all())  # padding is on the tokenizer's side

    check()


def test_ci_profile_is_registered_for_hypothesis_profile_option(pytester):
    pytester.makepyfile("""
        from hypothesis import settings
        def test_profile():
            print("profile", settings.get_current_profile_name(), settings.default.derandomize,
                  settings.default.max_examples, settings.default.deadline)
    """)
    result = pytester.runpytest_subprocess("-s", "--hypothesis-profile=tinykit-ci")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*profile tinykit-ci True 25 None*"])
