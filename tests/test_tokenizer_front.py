"""A model's front end from any source: a tokenizer for a config alone, a tiktoken layout's special
block, transformers-4 class names, family tokens, and tokenizers composed from parts (real files
from ../shared/hub-files, Meta's Llama 3 tokenizer.model from llama-models)."""

from __future__ import annotations

import json
import shutil

import pytest
from _hub_files import NATIVE, REMOTE_ONLY, repo_id
from tokenizer_sources import hub, llama3_tiktoken

import tinykit
from tinykit.errors import UnsupportedModelError
from tinykit.frontend.processor_files import PROCESSOR_FILES
from tinykit.tokenizer.build import make_tiny_tokenizer
from tinykit.tokenizer.check import check_tokenizer

ROLES = ("bos", "eos", "pad")
LLAMA2, PHI3 = hub("meta-llama/Llama-2-7b-hf"), hub("microsoft/Phi-3-mini-128k-instruct")
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello! What is 2 + 2?"},
    {"role": "assistant", "content": "4."},
]


def config_only(folder, tmp_path):
    """A folder holding only the real config.json of `folder`."""
    src = tmp_path / f"{folder.name}-config-only"
    src.mkdir()
    shutil.copyfile(folder / "config.json", src / "config.json")
    return src


def first(value):
    return value[0] if isinstance(value, list) else value


@pytest.mark.parametrize("folder", NATIVE, ids=repo_id)
def test_every_native_config_builds_from_config_json_alone(folder, tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    result = tinykit.make_tiny(config_only(folder, tmp_path), tmp_path / "tiny")  # checked
    source = json.loads((folder / "config.json").read_text())
    if not (result.path / "tokenizer_config.json").is_file():
        assert "vocab_size" not in source, "a text model shipped without a tokenizer"
        return  # ViT reads pixels only
    tok = AutoTokenizer.from_pretrained(result.path)
    full = AutoConfig.from_pretrained(result.path)
    config = full.get_text_config(decoder=True)
    # the tiny vocab, grown by the placeholder tokens a VLM's processor adds (Gemma 3's <boi>,
    # <image_soft_token>, <eoi>: docs/make-tiny.md, "The processor")
    media = 8 if any((result.path / n).is_file() for n in PROCESSOR_FILES) else 0
    assert config.vocab_size == len(tok) <= 1024 + media
    for role in ROLES:  # every role the source config names by id is that token in the tokenizer
        key = f"{role}_token_id"
        for tiny, raw in ((full, source), (config, source.get("text_config", {}))):
            if first(raw.get(key)) is not None:  # (transformers 5 moves some to text_config)
                value = getattr(tiny, key, getattr(config, key))
                assert first(value) == getattr(tok, key), (role, raw[key])
    for key in ("eos_token_id", "image_token_index", "image_token_id", "video_token_id"):
        for i in [v for v in [getattr(config, key, None)] if v is not None]:
            ids = i if isinstance(i, list) else [i]  # every named id is a special token
            assert set(ids) <= set(tok.all_special_ids) | set(tok.added_tokens_decoder), key


@pytest.mark.parametrize("name", sorted(REMOTE_ONLY))
def test_a_remote_code_config_alone_is_refused_for_its_code_not_its_tokenizer(name, tmp_path):
    with pytest.raises(UnsupportedModelError, match="--trust-remote-code"):
        tinykit.make_tiny(config_only(hub(name), tmp_path), tmp_path / "tiny")


def test_the_config_special_ids_name_new_tokens_where_nothing_names_them(tmp_path):
    """DeepSeek's config names bos 0 and eos 1; a byte-level BPE has one <|endoftext|>."""
    from transformers import AutoTokenizer

    src = config_only(hub("deepseek-ai/DeepSeek-R1"), tmp_path)
    out = make_tiny_tokenizer(src, tmp_path / "tok", vocab=512)
    tok = AutoTokenizer.from_pretrained(out)
    assert out.id_map == {0: tok.bos_token_id, 1: tok.eos_token_id}
    assert tok.bos_token_id != tok.eos_token_id and tok.eos_token == "<|eos|>"


def test_a_pad_id_with_no_role_token_keeps_its_id_on_the_special_token_there(tmp_path):
    """RoCBert names only pad_token_id = 0, which also pads its 64-row pronunciation and shape
    tables; its vocabulary is a trained byte-level BPE with <|endoftext|> at 0 and no pad role.
    A new <|pad|> at the end of the vocabulary would index past those tables."""
    from transformers import AutoConfig, AutoTokenizer

    built = tinykit.make_tiny("roc_bert", tmp_path / "tiny")
    config = AutoConfig.from_pretrained(built.path)
    tok = AutoTokenizer.from_pretrained(built.path)
    assert config.pad_token_id == tok.pad_token_id == 0 and tok.pad_token == "<|endoftext|>"
    assert config.pad_token_id < min(config.pronunciation_vocab_size, config.shape_vocab_size)


@pytest.mark.parametrize("model_type", ["layoutlmv3", "kosmos-2"])
def test_new_tokens_for_low_config_ids_take_those_ids(model_type, tmp_path):
    """RoBERTa-style configs name bos 0, pad 1, eos 2, and pad 1 is also the padding row of the
    position table (max_position_embeddings rows): the trained vocabulary's new <|pad|> and
    <|eos|> take ids 1 and 2, not the end of the vocabulary."""
    from transformers import AutoTokenizer

    out = make_tiny_tokenizer(model_type, tmp_path / "tok", vocab=512)
    tok = AutoTokenizer.from_pretrained(out)
    assert out.id_map == {0: 0, 1: 1, 2: 2} and len(tok) == out.vocab_size <= 512
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id) == (0, 1, 2)
    assert check_tokenizer(out.path)["ok"]


@pytest.fixture
def llama3(tmp_path):
    """Llama-3.2-1B-Instruct's real config.json with only Meta's tiktoken original/tokenizer.model."""
    src = tmp_path / "llama3"
    (src / "original").mkdir(parents=True)
    shutil.copyfile(hub("meta-llama/Llama-3.2-1B-Instruct") / "config.json", src / "config.json")
    shutil.copyfile(llama3_tiktoken(), src / "original" / "tokenizer.model")
    return src


LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
    "'<|end_header_id|>\\n\\n' + m['content'] + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)


def test_llama3_tiktoken_only_faithful_build_has_bos_eos_and_its_reserved_tokens(llama3, tmp_path):
    from transformers import AutoTokenizer

    template = tmp_path / "llama3.jinja"
    template.write_text(LLAMA3_TEMPLATE)
    out = tinykit.make_tiny(llama3, tmp_path / "f", mode="faithful", chat_template=template)
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok) == 128_256 and check_tokenizer(out.path)["ok"]
    assert (tok.bos_token, tok.bos_token_id) == ("<|begin_of_text|>", 128_000)
    assert (tok.eos_token, tok.eos_token_id) == ("<|end_of_text|>", 128_001)
    assert tok.convert_ids_to_tokens([128_004, 128_006, 128_009, 128_255]) == [
        "<|finetune_right_pad_id|>",
        "<|start_header_id|>",
        "<|eot_id|>",
        "<|reserved_special_token_247|>",
    ]
    block = [tok.added_tokens_decoder[i] for i in range(128_000, 128_256)]
    assert all(t.special for t in block)  # the whole block is special: skipped on decode
    assert tok("Hello world")["input_ids"] == [128_000, 9906, 1917]  # the real repo's ids and BOS
    rendered = tok.apply_chat_template(CHAT[1:2], add_generation_prompt=True)["input_ids"]
    assert rendered[:2] == [128_000, 128_006] and 128_009 in rendered
    assert (
        out.path / "original" / "tokenizer.model"
    ).read_bytes() == llama3_tiktoken().read_bytes()


def test_llama3_tiktoken_only_tiny_build_keeps_the_block_and_bos(llama3, tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    out = tinykit.make_tiny(llama3, tmp_path / "t")
    tok = AutoTokenizer.from_pretrained(out)
    config = AutoConfig.from_pretrained(out)
    names = set(tok.get_vocab())
    block = {f"<|reserved_special_token_{i}|>" for i in range(248)} | {"<|eot_id|>"}
    assert block <= names  # all 256 fit in half of --vocab 1024
    assert tok("hi")["input_ids"][0] == tok.bos_token_id == config.bos_token_id
    eos = [tok.convert_tokens_to_ids(t) for t in ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")]
    assert config.eos_token_id == eos  # the config's three eos ids, remapped


def test_a_composed_phi3_style_tokenizer_renders_its_template_and_round_trips(tmp_path):
    """Llama-2's vocabulary with Phi-3's tokens, tokenizer config and template: faithful mode
    gives the real Phi-3 tokenizer, tiny mode the same behaviour in 1,024 ids."""
    from transformers import AutoTokenizer

    parts = {"vocab": str(LLAMA2), "tokens": str(PHI3)}
    real = tinykit.make_tiny(PHI3, tmp_path / "f", mode="faithful", tokenizer=parts, check=False)
    tiny = tinykit.make_tiny(PHI3, tmp_path / "t", tokenizer=parts)  # checked
    phi3 = json.loads((PHI3 / "tokenizer_config.json").read_text())
    decoded = []
    for out in (real, tiny):
        tok = AutoTokenizer.from_pretrained(out)
        assert tok.chat_template == phi3["chat_template"]
        text = tok.apply_chat_template(CHAT, tokenize=False)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        for marker in ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>"):
            assert tok.convert_tokens_to_ids(marker) in ids  # one id each, not spelled out
        decoded.append(tok.decode(ids))
        plain = "Hello, World! The quick brown fox: 2 + 2 = 4."
        assert tok.decode(tok(plain, add_special_tokens=False)["input_ids"]) == plain
        assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<s>", *["<|endoftext|>"] * 2)
    assert decoded[0] == decoded[1]  # Phi-3's rstrip tokens eat the newline after them, alike
    tok = AutoTokenizer.from_pretrained(real)  # exactly the real Phi-3 tokenizer
    assert len(tok) == 32_011 and tok.convert_tokens_to_ids("<|user|>") == 32_010
    assert tok("Hello world")["input_ids"] == [15043, 3186]  # Llama-2's ids; Phi-3 adds no bos
    assert len(AutoTokenizer.from_pretrained(tiny)) <= 1024


def test_added_tokens_and_special_roles_are_part_of_the_build(tmp_path):
    from transformers import AutoTokenizer

    out = tinykit.make_tiny(
        hub("Qwen/Qwen2.5-VL-7B-Instruct"),
        tmp_path / "t",
        add_tokens=["<think>", "</think>"],
        special_tokens={"pad_token": "<|pad|>", "additional_special_tokens": ["<|tool|>"]},
        check=False,
    )
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok("<think>x</think>", add_special_tokens=False)["input_ids"]
    assert ids[0] == tok.convert_tokens_to_ids("<think>") and len(ids) == 3
    assert tok.decode(ids, skip_special_tokens=True) == "<think>x</think>"  # not special
    assert tok.pad_token == "<|pad|>" and "<|tool|>" in tok.all_special_tokens
    recorded = json.loads((out.path / "tinykit.json").read_text())["options"]
    assert recorded["add_tokens"] == ["<think>", "</think>"]


def test_a_manifest_entry_composes_its_tokenizer(tmp_path):
    from tinykit.standins.build import build_standins

    (tmp_path / "phi3").mkdir()
    shutil.copyfile(PHI3 / "config.json", tmp_path / "phi3" / "config.json")
    (tmp_path / "t.jinja").write_text("{% for m in messages %}<|user|>{{ m.content }}{% endfor %}")
    manifest = tmp_path / "standins.toml"
    manifest.write_text(
        '[models."org/phi3"]\nsource = "phi3"\n'
        f'tokenizer = {{ vocab = "{LLAMA2}", tokens = "{PHI3}", template = "t.jinja" }}\n'
        'add_tokens = ["<think>"]\nspecial_tokens = { pad_token = "<pad>" }\n'
    )
    report = build_standins(manifest, tmp_path / "hub", cache_dir=tmp_path / "cache")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(report.entries[0].path)
    assert tok.chat_template == (tmp_path / "t.jinja").read_text()
    assert tok.pad_token == "<pad>" and "<think>" in tok.get_vocab()
    assert "<|user|>" in tok.get_vocab()  # Phi-3's tokens on Llama-2's vocab


def transformers4_names() -> list[str]:
    """Tokenizer class names of transformers' own conversion table, with their -Fast twins."""
    from transformers.convert_slow_tokenizer import SLOW_TO_FAST_CONVERTERS

    names = {n for n in SLOW_TO_FAST_CONVERTERS} | {f"{n}Fast" for n in SLOW_TO_FAST_CONVERTERS}
    return sorted(n for n in names if not n.endswith("FastFast"))


def test_every_transformers4_class_name_resolves():
    from tinykit.tokenizer.train import known_class

    names = [*transformers4_names(), "BloomTokenizerFast", "LlamaTokenizerFast"]
    assert [n for n in names if not known_class(n)] == []


@pytest.mark.parametrize(
    "name",
    [
        "BloomTokenizerFast",  # gone from transformers 5: its generic backend
        "ElectraTokenizerFast",  # -> BertTokenizer
        "LEDTokenizerFast",  # -> RobertaTokenizer
        "Phi3TokenizerFast",  # -> LlamaTokenizer
        "MarkupLMTokenizerFast",  # needs a tags dict: falls through to a byte-level BPE
        "PegasusTokenizerFast",  # does not train from nothing: falls through
        "BlenderbotTokenizerFast",  # adds a space on decode: falls through
    ],
)
def test_a_config_naming_a_transformers4_class_builds(name, tmp_path):
    from transformers import AutoTokenizer

    src = tmp_path / "src"
    src.mkdir()
    (src / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": name}))
    out = make_tiny_tokenizer(src, tmp_path / "tok", vocab=512)
    assert check_tokenizer(out.path)["ok"]
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok("Hello world", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids).lower() == "hello world"  # BERT's layout lowercases


def test_a_config_only_bloom_repo_builds(tmp_path):
    src = tmp_path / "bloom"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"model_type": "bloom", "vocab_size": 250880}))
    (src / "tokenizer_config.json").write_text('{"tokenizer_class": "BloomTokenizerFast"}')
    assert tinykit.make_tiny(src, tmp_path / "tiny").params > 0  # checked, tokenizer included


@pytest.mark.parametrize(
    ("model_type", "tokens"),
    [
        ("glm4", ["[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>"]),
        ("glm4_moe", ["<|endoftext|>", "<|observation|>"]),
        ("nemotron", ["<extra_id_0>", "<extra_id_1>"]),
        ("qwen3", ["<|im_start|>", "<|im_end|>", "<think>", "<tool_call>"]),
        ("phi3", ["<|user|>", "<|assistant|>", "<|end|>"]),
    ],
)
def test_a_bare_family_type_gets_its_family_tokens_as_single_ids(model_type, tokens, tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    out = tinykit.make_tiny(model_type, tmp_path / "tiny")
    tok = AutoTokenizer.from_pretrained(out)
    for token in tokens:
        assert tok(token, add_special_tokens=False)["input_ids"] == [
            tok.convert_tokens_to_ids(token)
        ]
    config = AutoConfig.from_pretrained(out)
    if model_type == "glm4":  # GLM-4's three eos ids are its end, user and observation
        named = ("<|endoftext|>", "<|user|>", "<|observation|>")
        assert config.eos_token_id == [tok.convert_tokens_to_ids(t) for t in named]


def test_tokens_from_a_folder_on_a_trained_vocabulary(tmp_path):
    """A bare model_type has no vocabulary: one is trained, with Phi-3's tokens and template."""
    from transformers import AutoTokenizer

    out = tinykit.make_tiny("phi3", tmp_path / "t", tokenizer={"tokens": str(PHI3)})
    tok = AutoTokenizer.from_pretrained(out)
    text = tok.apply_chat_template(CHAT, tokenize=False)
    assert tok.convert_tokens_to_ids("<|user|>") in tok(text)["input_ids"]
    assert (tok.bos_token, tok.eos_token) == ("<s>", "<|endoftext|>")
    options = json.loads((out.path / "tinykit.json").read_text())["options"]
    assert options["tokens_source"]["name"] == str(PHI3)
