"""tinykit.strategies: shrink specs, tiny configs per model type, token batches, the CI profile."""

from __future__ import annotations

import pytest
import torch
import transformers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import HUB_FILES
from tinykit import ShrinkSpec, make_tiny
from tinykit.errors import UsageError
from tinykit.strategies import MODEL_FAMILIES, shrink_specs, tiny_configs, token_batches

HEAD_CLASS = {
    "encoder": transformers.AutoModelForMaskedLM,
    "t5": transformers.AutoModelForSeq2SeqLM,
}


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


@pytest.mark.parametrize("model_type", sorted(MODEL_FAMILIES))
def test_tiny_configs_build_models_that_train(model_type):
    @settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(config=tiny_configs(model_type), data=st.data())
    def check(config, data):
        auto = HEAD_CLASS.get(MODEL_FAMILIES[model_type], transformers.AutoModelForCausalLM)
        model = auto.from_config(config)
        assert sum(p.numel() for p in model.parameters()) < 2_000_000
        token = st.integers(0, config.vocab_size - 1)
        ids = torch.tensor([data.draw(st.lists(token, min_size=4, max_size=4))])
        loss = model(input_ids=ids, labels=ids).loss
        assert torch.isfinite(loss)
        loss.backward()

    check()


@settings(max_examples=1)
@given(st.data())
def test_tiny_configs_reject_an_unknown_model_type(data):
    with pytest.raises(UsageError, match=r"no config rules for this model_type.*Known: \["):
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
