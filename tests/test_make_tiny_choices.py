"""make-tiny's build choices: the model class (--class, --task, --num-labels, a recipe's
architectures), the vocab (--exact-vocab), shape presets, the tokenizer's source and chat template,
faithful mode on every tokenizer layout, and their provenance. Real Hub configs and bare types."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys

import pytest
from conftest import HUB_FILES, REPO
from safetensors import safe_open

import tinykit
from tinykit.errors import UsageError

BERT = HUB_FILES / "google-bert" / "bert-base-uncased"
OPT = HUB_FILES / "facebook" / "opt-125m"
QWEN3 = HUB_FILES / "Qwen" / "Qwen3-8B"  # config.json only
QWEN_VL = (
    HUB_FILES / "Qwen" / "Qwen2.5-VL-7B-Instruct"
)  # vocab.json + merges.txt + chat_template.json
LLAMA3 = HUB_FILES / "meta-llama" / "Llama-3.2-1B-Instruct"


def _json(path):
    return json.loads(path.read_text())


def _weights(folder) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return set(f.keys())


def test_class_by_name_is_built_recorded_and_verified(tmp_path):
    out = tmp_path / "cls"
    result = tinykit.make_tiny(
        "llama", out, model_class="LlamaForSequenceClassification", num_labels=3
    )
    config = _json(out / "config.json")
    assert result.model_class == config["architectures"][0] == "LlamaForSequenceClassification"
    assert len(config["id2label"]) == 3 and config["pad_token_id"] is not None
    assert "score.weight" in _weights(out)
    report = tinykit.verify(out)
    assert report.ok and report.model_class == "LlamaForSequenceClassification"
    manifest = _json(out / "tinykit.json")
    assert manifest["options"] == {
        "model_class": "LlamaForSequenceClassification",
        "num_labels": 3,
    }
    assert manifest["command"].endswith("--class LlamaForSequenceClassification --num-labels 3")
    assert "LlamaForSequenceClassification" in (out / "README.md").read_text()


def test_task_base_on_a_real_bert_config_keeps_the_pooler(tmp_path):
    """BERT's default is BertLMHeadModel, which has no pooler: a bare-model test re-initialised it."""
    import transformers

    out = tmp_path / "bert"
    assert tinykit.make_tiny(BERT, out, task="base").model_class == "BertModel"
    assert any(k.startswith("pooler.") for k in _weights(out))
    _, info = transformers.BertModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert tinykit.verify(out).model_class == "BertModel"


@pytest.mark.parametrize(
    ("source", "task", "expected"),
    [
        ("roberta", "sequence-classification", "RobertaForSequenceClassification"),
        ("bert", "token-classification", "BertForTokenClassification"),
        (str(OPT), "question-answering", "OPTForQuestionAnswering"),
    ],
)
def test_task_picks_the_auto_mapping_class(source, task, expected, tmp_path):
    result = tinykit.make_tiny(source, tmp_path / "t", task=task)
    assert result.model_class == expected
    assert _json(tmp_path / "t" / "config.json")["architectures"] == [expected]


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"model_class": "llamaforcausallm"}, "Did you mean 'LlamaForCausalLM'?"),
        ({"model_class": "BertModel"}, "another model type (BertConfig)"),
        ({"model_class": "AutoTokenizer"}, "not a transformers model class"),
        ({"task": "masked-lm"}, "Its tasks: base (LlamaModel), causal-lm (LlamaForCausalLM)"),
        ({"task": "sequence_classificaton"}, "Did you mean 'sequence-classification'"),
        ({"num_labels": 0}, "num_labels=0"),
        ({"preset": "hub-tiny"}, "Presets: hub-tiny-random"),
    ],
)
def test_bad_choices_are_one_line_usage_errors_and_write_nothing(kwargs, says, tmp_path):
    with pytest.raises(UsageError) as info:
        tinykit.make_tiny("llama", tmp_path / "t", **kwargs)
    assert says in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "t").exists()


def test_recipe_architectures_choose_the_class(tmp_path):
    recipe = tmp_path / "arch.toml"
    recipe.write_text('model_types = ["bert"]\n[set]\narchitectures = ["BertForMaskedLM"]\n')
    result = tinykit.make_tiny("bert", tmp_path / "t", recipes=(str(recipe),))
    assert result.model_class == "BertForMaskedLM"
    wrong = tmp_path / "wrong.toml"  # recipe files are read once per path
    wrong.write_text('model_types = ["bert"]\n[set]\narchitectures = ["LlamaModel"]\n')
    with pytest.raises(UsageError, match="another model type"):
        tinykit.make_tiny("bert", tmp_path / "u", recipes=(str(wrong),))


@pytest.mark.parametrize(("source", "vocab"), [("t5", 1024), (str(BERT), 777), ("gpt2", 1000)])
def test_exact_vocab_pads_the_tokenizer_to_exactly_n(source, vocab, tmp_path):
    import transformers

    out = tmp_path / "t"
    tinykit.make_tiny(source, out, vocab=vocab, exact_vocab=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert len(tokenizer) == vocab
    assert _json(out / "config.json")["vocab_size"] == vocab
    assert tokenizer.decode(tokenizer("hello world")["input_ids"], skip_special_tokens=True)
    assert "--exact-vocab" in _json(out / "tinykit.json")["command"]


def test_without_exact_vocab_the_vocab_is_an_upper_bound(tmp_path):
    import transformers

    tinykit.make_tiny("t5", tmp_path / "t", vocab=1024)  # a tokenizer trained for t5: ~400 ids
    assert len(transformers.AutoTokenizer.from_pretrained(tmp_path / "t")) < 1024


def test_preset_hub_tiny_random_on_a_real_opt_config(tmp_path):
    out = tmp_path / "opt"
    tinykit.make_tiny(OPT, out, preset="hub-tiny-random")
    config = _json(out / "config.json")
    assert (config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]) == (
        16,
        4,
        2,
    )
    manifest = _json(out / "tinykit.json")
    assert manifest["spec"]["hidden"] == 16 and manifest["options"] == {"preset": "hub-tiny-random"}
    assert manifest["command"].endswith("--preset hub-tiny-random")  # the preset's sizes implied
    # an explicit size wins over the preset, and is spelled out in the rebuild command
    wider = tinykit.make_tiny(OPT, tmp_path / "wide", preset="hub-tiny-random", hidden=32)
    assert _json(wider.path / "config.json")["hidden_size"] == 32
    assert "--hidden 32" in _json(wider.path / "tinykit.json")["command"]


def test_tokenizer_from_the_vl_sibling_and_a_substituted_chat_template(tmp_path):
    """The issue's case: a text model's config with the tokenizer of its VL sibling."""
    import transformers

    template = tmp_path / "client.jinja"
    template.write_text(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% endfor %}"
    )
    out = tmp_path / "t"
    tinykit.make_tiny(QWEN3, out, tokenizer=QWEN_VL, chat_template=template)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template == template.read_text()
    assert not (out / "chat_template.json").exists()
    assert "<|vision_start|>" in tokenizer.get_vocab()  # the VL tokenizer's own special tokens
    config = _json(out / "config.json")
    assert config["eos_token_id"] == tokenizer.eos_token_id
    assert config["vocab_size"] >= len(tokenizer)
    options = _json(out / "tinykit.json")["options"]
    assert options["tokenizer_source"]["name"] == str(QWEN_VL)
    assert options["tokenizer_source"]["revision"].startswith("sha256:")
    assert options["chat_template_sha256"] == tinykit_sha256(template)
    assert tinykit.verify(out).ok


def tinykit_sha256(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_faithful_mode_with_a_chat_template_keeps_the_real_vocab(tmp_path):
    import transformers

    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}{{ m.content }} {% endfor %}")
    out = tmp_path / "t"
    tinykit.make_tiny(BERT, out, mode="faithful", chat_template=template)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert len(tokenizer) == 30522 and tokenizer.chat_template == template.read_text()
    assert (out / "vocab.txt").read_bytes() == (BERT / "vocab.txt").read_bytes()


@pytest.fixture
def llama3_layout(tmp_path):
    """Llama-3.2's real config with a tiktoken `original/tokenizer.model` only (GPT-2's ranks)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    ranks = _json(HUB_FILES / "openai-community" / "gpt2-xl" / "vocab.json")
    src = tmp_path / "llama3"
    (src / "original").mkdir(parents=True)
    shutil.copyfile(LLAMA3 / "config.json", src / "config.json")
    (src / "original" / "tokenizer.model").write_text(
        "".join(
            f"{base64.b64encode(bytes(to_byte[c] for c in tok)).decode()} {rank}\n"
            for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1])
            if rank < 50256
        )
    )
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    (src / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": specials[0],
                "eos_token": specials[2],
                "tokenizer_class": "PreTrainedTokenizerFast",
                "added_tokens_decoder": {
                    str(50256 + i): {"content": t, "special": True} for i, t in enumerate(specials)
                },
            }
        )
    )
    return src


def test_faithful_mode_reads_a_tiktoken_only_layout(llama3_layout, tmp_path):
    import transformers

    out = tmp_path / "t"
    tinykit.make_tiny(llama3_layout, out, mode="faithful", check=False)  # a 128k-row embedding
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert len(tokenizer) == 50256 + 3
    assert tokenizer.convert_tokens_to_ids("<|eot_id|>") == 50258  # ids as in the source
    assert tokenizer.decode(tokenizer("Hello world")["input_ids"], skip_special_tokens=True) == (
        "Hello world"
    )
    assert (out / "original" / "tokenizer.model").read_bytes() == (
        llama3_layout / "original" / "tokenizer.model"
    ).read_bytes()


def test_faithful_mode_without_tokenizer_files_fails_and_writes_nothing(tmp_path):
    with pytest.raises(UsageError, match="no vocabulary file .* Pass --tokenizer SOURCE"):
        tinykit.make_tiny(OPT, tmp_path / "t", mode="faithful")  # tokenizer_config.json only
    assert not (tmp_path / "t").exists()


def test_cli_class_typo_is_one_stderr_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tinykit", "make-tiny", "bert", "--class", "BertModle"]
        + ["-o", str(tmp_path / "t")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("tinykit: error:")]
    assert proc.returncode == 2 and len(errors) == 1
    assert "Did you mean 'BertModel'?" in errors[0] and errors[0] == proc.stderr.splitlines()[-1]
    assert not (tmp_path / "t").exists()


def test_help_lists_the_choices():
    proc = subprocess.run(
        [sys.executable, "-m", "tinykit", "make-tiny", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    for flag in ("--class", "--task", "--num-labels", "--exact-vocab", "--preset", "--tokenizer"):
        assert flag in proc.stdout
    assert "--chat-template" in proc.stdout
