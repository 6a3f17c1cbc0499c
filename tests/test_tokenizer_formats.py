"""The other formats and paths: SentencePiece and tiktoken slow loaders, retraining, training
from a bare model_type, the forward-pass check, and round-trip properties."""

from __future__ import annotations

import base64
import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizer_sources import assert_tiny, hub

from tinykit.errors import UnsupportedModelError, UsageError
from tinykit.tokenizer.build import shrink_tokenizer
from tinykit.tokenizer.check import ASCII_PROBE, check_tokenizer
from tinykit.tokenizer.files import LLAMA3_PATTERN

LLAMA3_SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]


@pytest.mark.parametrize(
    ("repo", "model_file", "cls"),
    [
        ("google-t5/t5-base", "spiece.model", "T5Tokenizer"),
        ("meta-llama/Llama-2-7b-hf", "tokenizer.model", "LlamaTokenizer"),
    ],
)
def test_sentencepiece_model_is_shrunk_and_loads_slow_and_fast(repo, model_file, cls, tmp_path):
    import sentencepiece
    import transformers

    out = tmp_path / "tiny"
    result = shrink_tokenizer(hub(repo), out, vocab=1024)
    assert model_file in result.files and (out / model_file).stat().st_size < 40_000
    fast = transformers.AutoTokenizer.from_pretrained(out)
    # slow loader 1: sentencepiece itself, on the shrunk protobuf
    sp = sentencepiece.SentencePieceProcessor(model_file=str(out / model_file))
    assert sp.encode(ASCII_PROBE) == fast(ASCII_PROBE, add_special_tokens=False)["input_ids"]
    # slow loader 2: transformers converting the .model alone (no tokenizer.json)
    only_model = tmp_path / "only-model"
    only_model.mkdir()
    for f in (model_file, "tokenizer_config.json"):
        shutil.copyfile(out / f, only_model / f)
    converted = getattr(transformers, cls).from_pretrained(only_model)
    assert len(converted) == len(fast)
    assert converted(ASCII_PROBE)["input_ids"] == fast(ASCII_PROBE)["input_ids"]


@pytest.fixture
def llama3_style_source(tmp_path):
    """A Llama-3-layout repo: original/tokenizer.model in tiktoken format (GPT-2's real ranks)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    vocab = json.loads((hub("openai-community/gpt2-xl") / "vocab.json").read_text())
    src = tmp_path / "llama3-style"
    (src / "original").mkdir(parents=True)
    lines = [
        f"{base64.b64encode(bytes(to_byte[c] for c in tok)).decode()} {rank}"
        for tok, rank in sorted(vocab.items(), key=lambda kv: kv[1])
        if rank < 50256
    ]
    (src / "original" / "tokenizer.model").write_text("\n".join(lines) + "\n")
    template = (
        "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
        "'<|end_header_id|>\\n\\n' + m['content'] + '<|eot_id|>' }}{% endfor %}"
    )
    (src / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": "<|begin_of_text|>",
                "eos_token": "<|eot_id|>",
                "tokenizer_class": "PreTrainedTokenizerFast",
                "chat_template": template,
                "added_tokens_decoder": {
                    str(50256 + i): {
                        "content": t,
                        "lstrip": False,
                        "rstrip": False,
                        "normalized": False,
                        "single_word": False,
                        "special": True,
                    }
                    for i, t in enumerate(LLAMA3_SPECIALS)
                },
            }
        )
    )
    return src


def test_tiktoken_rank_file_is_shrunk_and_agrees_with_tiktoken(llama3_style_source, tmp_path):
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from transformers import AutoTokenizer

    out = tmp_path / "tiny"
    result = shrink_tokenizer(llama3_style_source, out, vocab=1024)
    tok = assert_tiny(result, out)
    assert result.kind == "byte-level-bpe" and "original/tokenizer.model" in result.files
    assert result.id_map == {50256 + i: 1019 + i for i in range(5)}
    ranks = load_tiktoken_bpe(str(out / "original" / "tokenizer.model"))
    enc = tiktoken.Encoding(
        "tiny", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )
    text = "Hello, World! The quick brown fox 2024 café 😀 中文"
    assert enc.encode(text) == tok(text, add_special_tokens=False)["input_ids"]
    rendered = AutoTokenizer.from_pretrained(out).apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=True
    )["input_ids"]
    assert rendered[:2] == [1019, 1021] and rendered[-1] == 1023


@pytest.mark.parametrize("repo", ["google-bert/bert-base-uncased", "meta-llama/Llama-2-7b-hf"])
def test_retrain_keeps_the_pipeline_and_special_tokens(repo, tmp_path):
    from transformers import AutoTokenizer

    result = shrink_tokenizer(hub(repo), tmp_path, vocab=1024, method="retrain")
    tok = assert_tiny(result, tmp_path)
    src = AutoTokenizer.from_pretrained(hub(repo))
    assert result.method == "retrain" and type(tok) is type(src)
    for old, new in result.id_map.items():
        assert tok.convert_ids_to_tokens(new) == src.convert_ids_to_tokens(old)
    assert set(src.all_special_tokens) <= set(tok.all_special_tokens)


@pytest.mark.parametrize(
    ("model_type", "cls", "kind"),
    [
        ("llama", "LlamaTokenizer", "byte-fallback-bpe"),
        ("gpt2", "GPT2Tokenizer", "byte-level-bpe"),
        ("bert", "BertTokenizer", "wordpiece"),
        ("t5", "T5Tokenizer", "unigram"),
        ("qwen2", "Qwen2Tokenizer", "byte-level-bpe"),
    ],
)
def test_bare_model_type_gets_a_trained_tokenizer_of_its_class(model_type, cls, kind, tmp_path):
    result = shrink_tokenizer(None, tmp_path, vocab=512, model_type=model_type)
    tok = assert_tiny(result, tmp_path, vocab=512)
    assert type(tok).__name__ == cls and result.kind == kind and result.method == "scratch"


def test_bare_model_type_without_text_input_fails_cleanly(tmp_path):
    with pytest.raises(UnsupportedModelError, match="no text input"):
        shrink_tokenizer(None, tmp_path, vocab=512, model_type="vit")
    assert list(tmp_path.iterdir()) == []


def test_check_runs_a_forward_pass_of_the_paired_model(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    tok_dir = tmp_path / "tok"
    result = shrink_tokenizer(hub("openai-community/gpt2-xl"), tok_dir, vocab=512)
    fits, too_small = tmp_path / "fits", tmp_path / "too-small"
    for folder, vocab in ((fits, result.vocab_size), (too_small, 300)):
        config = GPT2Config(vocab_size=vocab, n_embd=16, n_layer=1, n_head=2, n_positions=128)
        GPT2LMHeadModel(config).save_pretrained(folder)
    report = check_tokenizer(tok_dir, model_dir=fits)
    assert report["ok"] and report["forward"]["ran"] and report["forward"]["output_shape"][0] == 1
    report = check_tokenizer(tok_dir, model_dir=too_small)
    assert not report["ok"] and "model vocab_size 300 < len(tokenizer) 512" in report["problems"]


@pytest.fixture(scope="module")
def tiny_byte_tokenizers(tmp_path_factory):
    from transformers import AutoTokenizer

    toks = {}
    for repo in ("openai-community/gpt2-xl", "meta-llama/Llama-2-7b-hf"):
        out = tmp_path_factory.mktemp("tiny")
        shrink_tokenizer(hub(repo), out, vocab=400)
        toks[repo] = AutoTokenizer.from_pretrained(out), AutoTokenizer.from_pretrained(hub(repo))
    return toks


# Text without the special-token spellings themselves (those are meant to become one id).
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="<>"), max_size=60)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=texts)
def test_byte_tokenizers_round_trip_any_text_as_the_source_does(tiny_byte_tokenizers, text):
    # Llama-2's own tokenizer drops a lone leading space: the tiny one must do exactly what it does.
    for tok, source in tiny_byte_tokenizers.values():
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert all(0 <= i < len(tok) for i in ids)
        expected = source.decode(
            source(text, add_special_tokens=False)["input_ids"], clean_up_tokenization_spaces=False
        )
        assert tok.decode(ids, clean_up_tokenization_spaces=False) == expected


def test_check_refuses_a_folder_without_tokenizer_files(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UsageError, match="no tokenizer files"):
        check_tokenizer(tmp_path)


def test_shrink_into_a_fixture_folder_lists_only_its_own_files(tmp_path):
    """make_tiny writes the model next to the tokenizer: `files` must not claim those."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    result = shrink_tokenizer(hub("meta-llama/Llama-2-7b-hf"), tmp_path, vocab=512)
    assert result.files == (
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer.model",
        "tokenizer_config.json",
    )
    assert (tmp_path / "config.json").read_text() == '{"model_type": "gpt2"}'


def test_tiktoken_file_next_to_tokenizer_json_is_mirrored(llama3_style_source, tmp_path):
    """Real Llama-3 repos ship both; the tiny copies must agree rank for id."""
    src = tmp_path / "both"
    shutil.copytree(llama3_style_source / "original", src / "original")
    shutil.copyfile(hub("openai-community/gpt2-xl") / "tokenizer.json", src / "tokenizer.json")
    out = tmp_path / "tiny"
    result = shrink_tokenizer(src, out, vocab=700)
    assert "original/tokenizer.model" in result.files
    report = check_tokenizer(out)  # checks each rank's bytes against tokenizer.json's token
    assert report["ok"] and report["slow_files"]["original/tokenizer.model"]["ranks"] == 699
