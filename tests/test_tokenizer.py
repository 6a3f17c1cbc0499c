"""shrink_tokenizer on the hub-files tokenizers: special tokens, post-processor, chat template."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizer_sources import HUB_VOCAB_SOURCES, assert_tiny, hub

from tinykit.errors import ShrinkConstraintError, UnsupportedModelError, UsageError
from tinykit.tokenizer.build import shrink_tokenizer
from tinykit.tokenizer.check import CONVERSATION, check_tokenizer


def _source_added(folder):
    """content -> id of the source's added tokens, read with transformers."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    return {a.content: i for i, a in tok.added_tokens_decoder.items()}, tok


@pytest.mark.parametrize("repo", sorted(HUB_VOCAB_SOURCES))
def test_hub_tokenizers_shrink_and_keep_their_special_tokens(repo, tmp_path):
    src = hub(repo)
    result = shrink_tokenizer(src, tmp_path, vocab=1024)
    tok = assert_tiny(result, tmp_path)
    assert result.kind == HUB_VOCAB_SOURCES[repo] and result.method == "edit"

    src_added, src_tok = _source_added(src)
    for old, new in result.id_map.items():
        assert tok.convert_ids_to_tokens(new) == src_tok.convert_ids_to_tokens(old)
    # every special token the source names survives, as one id
    for special in src_tok.all_special_tokens:
        assert tok.convert_tokens_to_ids(special) < len(tok)
        assert tok.convert_ids_to_tokens(tok.convert_tokens_to_ids(special)) == special
    # post-processor: the same special tokens wrap a sentence
    src_ids, ids = src_tok("Hello world")["input_ids"], tok("Hello world")["input_ids"]
    specials = set(src_added.values())
    assert [src_tok.convert_ids_to_tokens(i) for i in src_ids if i in specials] == [
        tok.convert_ids_to_tokens(i) for i in ids if i in set(result.id_map.values())
    ]
    assert bool(tok.chat_template) == bool(src_tok.chat_template)

    report = check_tokenizer(tmp_path)
    assert report["ok"], report["problems"]
    if result.kind in ("byte-level-bpe", "byte-fallback-bpe"):
        assert report["lossless"] is True
    else:
        assert report["unk_rate"] < 0.5


def test_gpt2_endoftext_moves_from_50256_to_the_last_id(tmp_path):
    result = shrink_tokenizer(hub("openai-community/gpt2-xl"), tmp_path, vocab=1024)
    assert result.id_map == {50256: 1023}
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert tok("Hi<|endoftext|>")["input_ids"][-1] == 1023 == tok.eos_token_id


def test_qwen_chat_tokens_are_single_ids_in_the_rendered_template(tmp_path):
    src = hub("Qwen/Qwen2.5-VL-7B-Instruct")
    result = shrink_tokenizer(src, tmp_path, vocab=1024)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tmp_path)
    im_start, im_end = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    assert {151644: im_start, 151645: im_end}.items() <= result.id_map.items()
    ids = tok.apply_chat_template(CONVERSATION, tokenize=True)["input_ids"]
    assert ids.count(im_start) == ids.count(im_end) == len(CONVERSATION) + 1  # + system turn
    # config.json's image_token_id (151655) is remapped too
    config = json.loads((src / "config.json").read_text())
    assert tok.convert_ids_to_tokens(result.id_map[config["image_token_id"]]) == "<|image_pad|>"


def test_post_processor_ids_follow_the_remap(tmp_path):
    """BERT (TemplateProcessing) and BART (RobertaProcessing) insert the remapped ids."""
    from transformers import AutoTokenizer

    for repo in ("google-bert/bert-base-uncased", "facebook/bart-large-cnn"):
        out = tmp_path / repo.replace("/", "_")
        out.mkdir()
        shrink_tokenizer(hub(repo), out, vocab=512)
        tj = json.loads((out / "tokenizer.json").read_text())
        tok = AutoTokenizer.from_pretrained(out)
        ids = tok("hello world")["input_ids"]
        assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
        proc = tj["post_processor"]
        if proc["type"] == "TemplateProcessing":
            assert proc["special_tokens"]["[CLS]"]["ids"] == [tok.cls_token_id]
        else:
            assert proc["cls"] == ["<s>", tok.cls_token_id]


def test_old_string_merges_and_new_pair_merges_shrink_the_same():
    from tokenizers import Tokenizer

    from tinykit.tokenizer.edit import shrink_json

    path = hub("openai-community/gpt2-xl") / "tokenizer.json"
    old_format = json.loads(path.read_text())
    assert isinstance(old_format["model"]["merges"][0], str)
    new_format = json.loads(Tokenizer.from_file(str(path)).to_str())
    assert isinstance(new_format["model"]["merges"][0], list)
    a, map_a, _ = shrink_json(old_format, 700, {"<|endoftext|>"})
    b, map_b, _ = shrink_json(new_format, 700, {"<|endoftext|>"})
    assert a["model"]["merges"] == b["model"]["merges"] and len(a["model"]["merges"]) > 300
    assert map_a == map_b


def test_mistral_v3_keeps_chat_tokens_and_drops_unused_control_tokens(tmp_path):
    result = shrink_tokenizer(hub("mistralai/Mistral-7B-Instruct-v0.3"), tmp_path, vocab=1024)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert tok.convert_tokens_to_ids("[INST]") == 3 and tok.convert_tokens_to_ids("[/INST]") == 4
    assert "[control_700]" in result.dropped and "[INST]" not in result.dropped
    assert check_tokenizer(tmp_path)["chat_template"]["rendered"]


def test_output_is_byte_identical_across_runs(tmp_path):
    for repo in ("google-t5/t5-base", "google/gemma-2b-it"):  # SentencePiece mirror; training
        a, b = tmp_path / "a" / repo, tmp_path / "b" / repo
        a.mkdir(parents=True), b.mkdir(parents=True)
        ra = shrink_tokenizer(hub(repo), a, vocab=600)
        shrink_tokenizer(hub(repo), b, vocab=600)
        for f in ra.files:
            assert (a / f).read_bytes() == (b / f).read_bytes(), f


def test_clear_errors(tmp_path):
    with pytest.raises(UnsupportedModelError, match="remote code"):
        shrink_tokenizer(hub("THUDM/chatglm3-6b"), tmp_path, vocab=1024)
    with pytest.raises(UsageError, match="no tokenizer files"):
        shrink_tokenizer(hub("Qwen/Qwen3-8B"), tmp_path, vocab=1024)  # config.json only
    with pytest.raises(ShrinkConstraintError, match="--vocab 200 is too small"):
        shrink_tokenizer(hub("openai-community/gpt2-xl"), tmp_path, vocab=200)  # < 256 bytes
    with pytest.raises(ShrinkConstraintError, match="special tokens"):
        shrink_tokenizer(hub("openai/whisper-base"), tmp_path, vocab=128)
    with pytest.raises(ShrinkConstraintError, match="Pass --vocab"):  # CLIP needs every "c</w>"
        shrink_tokenizer(hub("openai/clip-vit-large-patch14"), tmp_path, vocab=300)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UsageError, match="neither"):
        shrink_tokenizer(None, tmp_path, vocab=1024)


def _recounted_merges(words, n, prefix):
    """The BPE merges of `words` counting every pair again before each merge (the definition
    relearn._learn computes incrementally): the most frequent pair first, ties to the smallest."""
    from collections import Counter

    merges, new = [], []
    while len(merges) < n:
        pairs = Counter()
        for symbols, count in words.items():
            for pair in zip(symbols, symbols[1:], strict=False):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        token = best[0] + best[1].removeprefix(prefix)
        merges.append(list(best))
        new.append(token)
        merged = Counter()
        for symbols, count in words.items():
            out, i = [], 0
            while i < len(symbols):
                if tuple(symbols[i : i + 2]) == best:
                    out.append(token)
                    i += 2
                else:
                    out.append(symbols[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return merges, new


@given(
    words=st.dictionaries(st.text("aab", min_size=1, max_size=12), st.integers(1, 4), max_size=10),
    n=st.integers(0, 40),
    prefix=st.sampled_from(["", "##", "a"]),
)
@settings(max_examples=300, deadline=None)
def test_the_incremental_bpe_learner_equals_recounting_at_every_merge(words, n, prefix):
    from collections import Counter

    from tinykit.tokenizer.relearn import _learn

    split = Counter({(w[0], *(prefix + c for c in w[1:])): k for w, k in words.items()})
    assert _learn(split, n, prefix) == _recounted_merges(split, n, prefix)


@pytest.mark.parametrize(
    "cls", ["Qwen2Tokenizer", "CLIPTokenizer", "BertTokenizer", "T5Tokenizer", "LlamaTokenizer"]
)
def test_training_twice_in_one_process_gives_the_same_tokenizer(cls, monkeypatch):
    """Tie order in the trainers (hash maps, threads) must not reach the JSON, for BPE
    (byte-level, with a word suffix, with byte fallback), WordPiece and Unigram alike; the
    trainer runs serially and leaves TOKENIZERS_PARALLELISM as it found it."""
    import os

    from tinykit.tokenizer.train import train_json

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    first, second = train_json(cls, 500), train_json(cls, 500)
    assert first == second
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
