"""Training fallbacks: retrain a source small (its pipeline kept), or train one from scratch.

Used when there is nothing to edit (a repo that ships only tokenizer_config.json because its
vocab files are LFS-only, or a bare transformers model_type), or on request (method="retrain").
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tinykit.errors import UnsupportedModelError
from tinykit.tokenizer.edit import BYTE_FALLBACK_PIECES, _remap_processor, tokenizer_kind
from tinykit.tokenizer.family import Family
from tinykit.tokenizer.parts import ROLES
from tinykit.tokenizer.relearn import canonical

# A small fixed corpus: same input, same tokenizer, every run.
CORPUS = (
    "The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.",
    "How vexingly quick daft zebras jump! Sphinx of black quartz, judge my vow.",
    "In 2024, 13 models were trained on 4096 GPUs for 3.5 days; loss fell from 10.2 to 1.87.",
    "def main(argv: list[str]) -> int:\n    return len(argv) * 2  # comment\n",
    'Hello, world! {"key": [1, 2, 3], "ok": true} <tag attr="x">text</tag> a+b=c; x*y/z-1',
    "Café, naïve, résumé, façade, jalapeño, Übermaß, Ærøskøbing, São Paulo, Kraków.",
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
    "Portez ce vieux whisky au juge blond qui fume. El veloz murciélago hindú comía feliz.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "中文分词测试：我们今天学习自然语言处理。日本語のテキストも少し入れます。한국어 문장.",
    "Emoji 😀🚀🎉👍 and symbols © ® ™ € £ ¥ ° ± × ÷ → ← ∞ ≈ ≠.",
    "user: What is the capital of France?\nassistant: The capital of France is Paris.",
    "".join(chr(c) for c in range(32, 127)),
)

# The last resort for a text model without a class of its own: a byte-level BPE reads any text.
BYTE_LEVEL_CLASS = "GPT2Tokenizer"
# Vocab files without tokenizer.json whose tokenizer_config.json names no class: the file that
# marks the layout and the class that reads it, first match wins ("*.model" is any other
# SentencePiece model file).
FALLBACK_CLASSES = (
    ("spiece.model", "T5Tokenizer"),
    ("*.model", "LlamaTokenizer"),
    ("vocab.txt", "BertTokenizer"),
    ("merges.txt", "GPT2Tokenizer"),
)
_GENERIC = {None, "TokenizersBackend", "PreTrainedTokenizerFast"}
_PARALLELISM = "TOKENIZERS_PARALLELISM"


@dataclass(frozen=True)
class Trained:
    """A tokenizer trained from nothing: its JSON, the class it was trained as, and that
    class's special token of each role ({"eos": "</s>"})."""

    tj: dict
    tokenizer_class: str
    roles: dict[str, str]


def type_class(model_type: str | None) -> str | None:
    """The class transformers' auto table gives `model_type`; None where it names only the
    generic backend (or nothing): the table does not know the family's layout."""
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    name = TOKENIZER_MAPPING_NAMES.get(model_type) if model_type else None
    if isinstance(name, (tuple, list)):
        name = next((n for n in name if n), None)
    return None if name in _GENERIC else name


def class_for_model_type(model_type: str | None, family: Family | None = None) -> str:
    """The class a tokenizer is trained as for `model_type` (the first of `candidates`)."""
    return candidates(model_type, family)[0]


def candidates(model_type: str | None, family: Family | None = None) -> list[str]:
    """Classes to train for `model_type`, best first: the type's own class (transformers' auto
    tables), its text tower's, the family's (its recipe), then a byte-level BPE.

    Raises UnsupportedModelError for a type transformers lacks or one that reads no text."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    family = family or Family()
    found: list[str] = []
    if model_type is not None:
        if model_type not in CONFIG_MAPPING_NAMES:
            raise UnsupportedModelError(
                f"model_type {model_type!r} is not known to transformers. "
                "A tokenizer can only be trained for a registered architecture. "
                "Check the spelling (e.g. 'llama', 'gpt2', 'bert', 't5')."
            )
        own = type_class(model_type)
        # a composite without its own entry reads its text tower's ids
        tower = None if own else _text_tower_type(model_type)
        found += [c for c in (own, type_class(tower)) if c and _trainable(c)]
        text = (
            found
            or tower is not None
            or model_type in _text_model_types()
            or _is_text_tower(model_type)
            or _reads_text(model_type)
        )
        if not text:
            raise UnsupportedModelError(
                f"model_type {model_type!r} takes no text input, so it has no tokenizer. "
                "Only text, multimodal and speech-to-text architectures get a tiny tokenizer. "
                "Skip the tokenizer for this model (has_tokenizer_files() is False)."
            )
    found += [c for c in (family.tokenizer_class, BYTE_LEVEL_CLASS) if c]
    return list(dict.fromkeys(found))


@functools.cache  # a fact of the installed transformers: asked once per process
def _trainable(name: str) -> bool:
    """A class tinykit can train from nothing: a tokenizers-backed class that builds without
    vocabulary files. Python-only classes (vocab_file required, extra packages) are not."""
    try:
        return getattr(tokenizer_class(name)(), "_tokenizer", None) is not None
    except Exception:  # any constructor failure means: not trainable from scratch
        return False


def _is_text_tower(model_type: str) -> bool:
    """The text tower of a composite model (Qwen2-VL's `qwen2_vl_text`): its config class is
    the composite's `text_config`, and it reads token ids as any text model does."""
    from transformers import CONFIG_MAPPING

    return getattr(CONFIG_MAPPING[model_type], "base_config_key", None) == "text_config"


MEDIA_ARGUMENTS = ("pixel_values", "input_values", "input_features")


@functools.cache
def _reads_text(model_type: str) -> bool:
    """A base model whose forward reads token ids: as its main input (EmbeddingGemma 2, which
    embeds images and audio too), or beside no pixels or audio (a text tower that no composite
    names as its `base_config_key`: Mistral Large 4's, SAM 3 Lite's text encoder)."""
    import inspect

    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(model_type)
    try:
        cls = getattr(transformers, str(name))
        params = inspect.signature(cls.forward).parameters
    except (AttributeError, ImportError, TypeError, ValueError):  # no class, or its package
        return False
    main = getattr(cls, "main_input_name", None) == "input_ids"
    return "input_ids" in params and (main or not any(a in params for a in MEDIA_ARGUMENTS))


@functools.cache
def _text_tower_type(model_type: str) -> str | None:
    """The model_type of the text sub-config of a composite default (a dual encoder's BERT,
    SAM 3 Lite's text encoder), when it has a vocabulary; None for a text-less type."""
    from transformers import CONFIG_MAPPING

    try:
        text = CONFIG_MAPPING[model_type]().get_text_config()
    except Exception:  # a default that does not construct has no tower to ask
        return None
    tower = getattr(text, "model_type", None)
    found = tower in CONFIG_MAPPING and tower != model_type and hasattr(text, "vocab_size")
    return tower if found else None


@functools.cache
def _text_model_types() -> frozenset[str]:
    from transformers.models.auto import modeling_auto

    kinds = (
        "CAUSAL_LM",
        "SEQ_TO_SEQ_CAUSAL_LM",
        "MASKED_LM",
        "IMAGE_TEXT_TO_TEXT",
        "SPEECH_SEQ_2_SEQ",
        "TEXT_ENCODING",
        "TOKEN_CLASSIFICATION",  # text taggers without an LM head (openai_privacy_filter)
        # image/audio models that read text too: dual encoders, retrievers, text-to-speech
        "ZERO_SHOT_IMAGE_CLASSIFICATION",
        "ZERO_SHOT_OBJECT_DETECTION",
        "RETRIEVAL",
        "MULTIMODAL_LM",
        "VISUAL_QUESTION_ANSWERING",
        "DOCUMENT_QUESTION_ANSWERING",
        "TEXT_TO_SPECTROGRAM",
        "TEXT_TO_WAVEFORM",
    )
    found: set[str] = set()
    for kind in kinds:
        found |= set(getattr(modeling_auto, f"MODEL_FOR_{kind}_MAPPING_NAMES", {}))
    return frozenset(found)


def tokenizer_class(name: str):
    """The transformers class called `name`, resolved as AutoTokenizer resolves it: transformers-4
    names map to their transformers-5 classes (BloomTokenizerFast, ElectraTokenizerFast, ...)."""
    import transformers
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    if name in _GENERIC:
        return transformers.GPT2Tokenizer  # a generic fast tokenizer: train a byte-level BPE
    cls = tokenizer_class_from_name(name)
    if cls is not None and cls.__name__ in _GENERIC:
        return transformers.GPT2Tokenizer  # a retired name of the generic backend (Bloom's)
    if cls is not None and not getattr(cls, "__name__", "").startswith("Dummy"):
        return cls
    raise UnsupportedModelError(
        f"tokenizer class {name!r} is not in transformers {transformers.__version__}. "
        "tinykit reads only classes transformers builds itself (no remote code). "
        "Pass --tokenizer SOURCE with tokenizer files, or name a transformers class."
    )


def known_class(name: str) -> bool:
    """Whether transformers resolves tokenizer class `name` (a remote-code or made-up name: no)."""
    try:
        tokenizer_class(name)
    except UnsupportedModelError:
        return False
    return True


def train_first(names: Sequence[str], vocab: int) -> Trained:
    """A tokenizer trained as the first class of `names` that trains from nothing and encodes
    text losslessly where its kind promises to (a class that needs vocabulary files, an extra
    package, or adds a space on decode falls through to the next)."""
    failures = []
    for name in names:
        try:
            return train_json(name, vocab)
        except Exception as e:  # a class that cannot be trained here: try the next one
            failures.append(f"{name}: {type(e).__name__}")
    raise UnsupportedModelError(
        f"no tokenizer class trains here ({'; '.join(failures)}). "
        "Pass --tokenizer SOURCE with tokenizer files."
    )


def train_json(class_name: str, vocab: int) -> Trained:
    """A tokenizer trained from scratch as `class_name`, at most `vocab` ids; raises where its
    decode does not give back the probe text its kind promises to keep."""
    from tokenizers import Tokenizer

    from tinykit.tokenizer.check import LOSSLESS_KINDS, PROBE, expected_round_trip

    tok = tokenizer_class(class_name)()
    tj = _train(tok, vocab, ())
    kind = tokenizer_kind(tj)
    if kind in LOSSLESS_KINDS and not tj["model"].get("end_of_word_suffix"):
        backend = Tokenizer.from_str(json.dumps(tj))
        ids = backend.encode(PROBE, add_special_tokens=False).ids
        back = backend.decode(ids, skip_special_tokens=True)
        if back != expected_round_trip(tj, PROBE):
            raise ValueError(f"{class_name} does not decode its encoding of the probe losslessly")
    roles = {r: t for r in ROLES if isinstance(t := getattr(tok, f"{r}_token", None), str)}
    name = class_name if class_name not in _GENERIC else type(tok).__name__
    return Trained(tj, name, roles)


def retrain_json(source_tokenizer, vocab: int) -> dict:
    """Retrain the source's pipeline on its own decoded vocab (field guide §2, method B)."""
    n = len(source_tokenizer)
    pieces = source_tokenizer.batch_decode([[i] for i in range(min(n, 20000))])
    return _train(source_tokenizer, vocab, pieces)


def _train(tok, vocab: int, extra_corpus) -> dict:
    corpus = list(CORPUS) + [
        " ".join(extra_corpus[i : i + 64]) for i in range(0, len(extra_corpus), 64)
    ]
    model = tok.backend_tokenizer.model  # read as it is: its JSON would be written in full
    needs_bytes = type(model).__name__ == "BPE" and model.byte_fallback
    budget = vocab - (len(BYTE_FALLBACK_PIECES) if needs_bytes else 0)
    with _serial_trainer():
        trained = tok.train_new_from_iterator(
            corpus, vocab_size=max(budget, 32), show_progress=False
        )
    tj = json.loads(trained.backend_tokenizer.to_str())
    tj = canonical(tj, trained.backend_tokenizer, corpus)
    if needs_bytes:
        tj = append_model_tokens(
            tj, [p for p in BYTE_FALLBACK_PIECES if p not in tj["model"]["vocab"]]
        )
    return tj


@contextlib.contextmanager
def _serial_trainer() -> Iterator[None]:
    """tokenizers' trainers on one thread (its switch is this variable, read per call): on a
    corpus this small, handing work to its thread pool takes longer than the work, half the
    training time. The result is the same: `canonical` relearns what thread order could change."""
    before = os.environ.get(_PARALLELISM)
    os.environ[_PARALLELISM] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_PARALLELISM, None)
        else:
            os.environ[_PARALLELISM] = before


def append_model_tokens(tj: dict, tokens: list[str]) -> dict:
    """Append plain tokens to a BPE/WordPiece/WordLevel vocab; added-only tokens shift up."""
    model = tj["model"]
    size = len(model["vocab"])
    shift = len(tokens)
    for i, tok in enumerate(tokens):
        model["vocab"][tok] = size + i
    ids: dict[str, int] = {}
    for a in tj.get("added_tokens", []):
        if a["id"] >= size:
            a["id"] += shift
        ids[a["content"]] = a["id"]
    tj["post_processor"] = _remap_processor(tj.get("post_processor"), {**model["vocab"], **ids})
    return tj


def append_added_tokens(tj: dict, entries: list[dict]) -> dict:
    """Add the special/added tokens (dicts: content, special, ...) missing from `tj`, at the end."""
    have = {a["content"] for a in tj.get("added_tokens", [])}
    vocab = tj["model"]["vocab"]
    have |= {p for p, _ in vocab} if isinstance(vocab, list) else set(vocab)
    next_id = 1 + max([len(vocab) - 1] + [a["id"] for a in tj.get("added_tokens", [])])
    for e in entries:
        if e["content"] in have:
            continue
        tj.setdefault("added_tokens", []).append({"id": next_id, **added_entry(e)})
        have.add(e["content"])
        next_id += 1
    return tj


def added_entry(e: dict) -> dict:
    """A tokenizer.json `added_tokens` entry (without its id) for a token description `e`."""
    return {
        "content": e["content"],
        "single_word": e.get("single_word", False),
        "lstrip": e.get("lstrip", False),
        "rstrip": e.get("rstrip", False),
        "normalized": e.get("normalized", False),
        "special": e.get("special", True),
    }
