"""Properties of the structured JSON shrink, on real tokenizer.json documents."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizer_sources import hub

from tinykit.tokenizer.edit import (
    model_vocab,
    processor_tokens,
    shrink_json,
    tokenizer_kind,
    vocab_size,
)

REPOS = [
    "openai-community/gpt2-xl",
    "google-bert/bert-base-uncased",
    "google-t5/t5-base",
    "meta-llama/Llama-2-7b-hf",
    "facebook/bart-large-cnn",
]


@pytest.fixture(scope="module")
def documents():
    from tokenizers import Tokenizer

    return {
        r: json.loads(Tokenizer.from_file(str(hub(r) / "tokenizer.json")).to_str()) for r in REPOS
    }


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(repo=st.sampled_from(REPOS), vocab=st.integers(400, 4000))
def test_shrink_keeps_ids_compact_and_everything_consistent(documents, repo, vocab):
    from tokenizers import Tokenizer

    src = documents[repo]
    essential = processor_tokens(src)
    new, old_to_new, dropped = shrink_json(src, vocab, essential)
    size = vocab_size(new)
    assert size == len(old_to_new) <= vocab
    assert sorted(old_to_new.values()) == list(range(size))  # compact, no id used twice
    # the same token text at the old and the new id
    old_vocab, new_vocab = model_vocab(src), model_vocab(new)
    old_added = {a["id"]: a["content"] for a in src["added_tokens"]}
    new_added = {a["id"]: a["content"] for a in new["added_tokens"]}
    for old, n in old_to_new.items():
        before = old_added.get(old) or old_vocab[old]
        after = new_added.get(n) or new_vocab[n]
        assert before == after
    kept = set(new_vocab)
    for a, b in new["model"].get("merges", []):
        assert a in kept and b in kept and a + b in kept
    assert essential <= set(new_added.values()) | kept
    assert tokenizer_kind(new) == tokenizer_kind(src)
    tok = Tokenizer.from_str(json.dumps(new))  # tokenizers accepts the document
    assert tok.get_vocab_size() == size
    assert max(tok.encode("Hello world, 2024!").ids) < size
    assert not dropped or len(src["added_tokens"]) > vocab // 8
