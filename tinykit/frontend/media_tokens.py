"""The placeholder tokens of a type's processor (`<image>`, and those it adds itself, such as
Idefics3's `<fake_token_around_image>`) added to the tiny tokenizer as special tokens, so the
processor built around it later finds them. model/inputs/processor.py maps the config's ids of them
(`image_token_id`, `image_token_index`, ...) to the ids returned here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tinykit.errors import TinyArtifactInvalid
from tinykit.frontend.processors import (
    assemble,
    default_parts,
    is_int,
    load_tokenizer,
    placeholders,
    processor_class,
)

NAMED_TOKEN = re.compile(r"\w+ has no attribute (\w+_token)(?:_id)?")
"""transformers' error for a named token a tokenizer lacks (`tokenizer.boi_token`)."""


def add_media_tokens(
    tmp: Path, model_type: str, vocab_size: int, name: str
) -> tuple[int, dict[str, int]] | None:
    """Add the placeholder tokens of `model_type`'s processor to the tiny tokenizer in `tmp`:
    the tokenizer's new length and the processor's token ids by name (`image_token` -> id).
    None: the type has no processor around a tokenizer, or nothing was added. `name` names the
    source in errors."""
    cls = processor_class(model_type)
    if cls is None or "tokenizer" not in cls.get_attributes():
        return None
    parts = default_parts(cls, model_type)
    processor, tokenizer, before = _built_with_named_tokens(cls, tmp, parts)
    if tokenizer is None:  # no tokenizer transformers loads alone: no processor around it
        return None
    new = _processor_tokens(processor, tokenizer, before) if processor is not None else []
    _add_special_tokens(tmp, new)
    if not new and before == vocab_size:  # nothing added, by name or otherwise
        return None
    grown = _grown_tokenizer(tmp, name)
    if len(grown) == vocab_size:
        return None
    # the processor's own ids as it computes them from the grown tokenizer's files
    rebuilt = assemble(cls, grown, parts, {}) or processor
    return len(grown), _token_ids(rebuilt, grown) if rebuilt is not None else {}


def _grown_tokenizer(tmp: Path, name: str) -> Any:
    """The tiny tokenizer once the processor's tokens are added; it must still load."""
    grown = load_tokenizer(tmp)
    if grown is None:
        raise TinyArtifactInvalid(
            f"the tiny tokenizer of {name} does not load once the tokens of its processor "
            "are added. This is a tinykit bug: report it with the source."
        )
    return grown


def _processor_tokens(processor: Any, tokenizer: Any, before: int) -> list[str]:
    """The processor's placeholder tokens the tokenizer lacks, and those the processor added to
    its tokenizer as it built (from id `before` on), in id order first."""
    added = sorted((i, t) for t, i in tokenizer.get_added_vocab().items() if i >= before)
    missing = [t for t in placeholders(processor).values() if not _is_token(tokenizer, t)]
    return list(dict.fromkeys([*(t for _, t in added), *missing]))


def _built_with_named_tokens(cls: Any, folder: Path, parts: dict[str, Any]) -> tuple[Any, Any, int]:
    """`cls` built around the tokenizer in `folder` (None: it does not build), that tokenizer
    (None: it does not load) and its length then. A processor that reads a named token of its
    tokenizer this one lacks (Gemma 3's `tokenizer.boi_token`, DeepSeek-VL's `image_token`)
    gets it first: `<boi>`, a special token named in tokenizer_config.json, as the real repos'
    tokenizers name theirs."""
    named: set[str] = set()
    while True:
        tokenizer = load_tokenizer(folder)
        if tokenizer is None:
            return None, None, 0
        before = len(tokenizer)
        try:
            return cls(**{**parts, "tokenizer": tokenizer}), tokenizer, before
        except AttributeError as e:
            match = NAMED_TOKEN.fullmatch(str(e))
            if match is None or match[1] in named:
                return None, tokenizer, before
            named.add(match[1])
            _add_special_tokens(folder, [f"<{match[1].removesuffix('_token')}>"], match[1])
        except Exception:  # a processor that does not build here: no tokens to learn
            return None, tokenizer, before


def _token_ids(processor: Any, tokenizer: Any) -> dict[str, int]:
    """The processor's token ids by name (`image_token` -> its id): its token strings', the ids
    it holds itself over those (`image_token_id`: Aya Vision's is its patch token's), and the
    tokenizer's named tokens over both (Gemma 3's processor holds its `boi_token` as image token,
    its tokenizer's `image_token` is the one the model reads)."""
    from transformers import PreTrainedTokenizerBase

    ids = {n: tokenizer.convert_tokens_to_ids(t) for n, t in placeholders(processor).items()}
    for name, value in vars(processor).items():
        if name.endswith("_token_id") and is_int(value):
            ids[name.removesuffix("_id")] = value
    standard = set(PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES)
    for name in tokenizer.SPECIAL_TOKENS_ATTRIBUTES:
        if name not in standard:
            ids[name] = getattr(tokenizer, f"{name}_id", None)
    return {n: i for n, i in ids.items() if is_int(i)}


def _is_token(tokenizer: Any, token: str) -> bool:
    found = tokenizer.convert_tokens_to_ids(token)
    return is_int(found) and tokenizer.convert_ids_to_tokens(found) == token


def _add_special_tokens(folder: Path, tokens: list[str], name: str | None = None) -> None:
    """Append `tokens` to the tokenizer files in `folder` as special tokens; `name` names the
    one token in tokenizer_config.json (transformers then reads `tokenizer.<name>`)."""
    from tokenizers import AddedToken, Tokenizer

    if not tokens:
        return
    path = folder / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in tokens])
    tokenizer.save(str(path), pretty=False)
    ids = {t: tokenizer.token_to_id(t) for t in tokens}
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text("utf-8"))
    if name is not None:
        config[name] = tokens[0]
    decoder = config.setdefault("added_tokens_decoder", {})
    for token, i in ids.items():
        decoder[str(i)] = {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
    text = json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    config_path.write_text(text, "utf-8")
