"""A tokenizer.json read into the document `tokenizers` writes, without building its model.

`json.loads(Tokenizer.from_file(path).to_str())` gives the canonical document (defaults
filled in, merges as pairs, ids as tokenizers assigns them), but builds the whole model first
and writes it out again: for a 32k-150k token BPE that is most of a tiny build. Here only the
pipeline (normalizer, pre-tokenizer, post-processor, decoder, the model's options) goes through
`tokenizers`, with the vocabulary emptied; the vocabulary, merges and added tokens come from
the file where they already have the canonical form. A file where they do not (ids with holes,
added tokens tokenizers would renumber, a merge it would not read) takes the full round trip,
which also names what is wrong with a broken file.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ADDED_KEYS = ("id", "content", "single_word", "lstrip", "rstrip", "normalized", "special")


def read_tokenizer_json(path: Path) -> dict:
    """The document `tokenizers` writes for the tokenizer in `path`; raises what
    `Tokenizer.from_file` raises for a file it cannot read."""
    with _no_collection():
        quick = _quick(path.read_bytes())
    if quick is not None:
        return quick
    from tokenizers import Tokenizer

    return json.loads(Tokenizer.from_file(str(path)).to_str())


@contextmanager
def _no_collection() -> Iterator[None]:
    """The cyclic collector paused: a document is 100k+ new lists and dicts without a cycle,
    and while they are made it would walk the whole heap (torch, transformers) several times
    over, for half the read's time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _quick(data: bytes) -> dict | None:
    """The canonical document, or None where the file's own parts are not already canonical."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    model = doc.get("model") if isinstance(doc, dict) else None
    if not isinstance(model, dict):
        return None
    ids = _vocab(model)
    merges = _merges(model.get("merges"), ids) if "merges" in model else []
    added = _added(doc.get("added_tokens", []), ids)
    if ids is None or merges is None or added is None:
        return None
    skeleton = {**model, "vocab": {}, **({"merges": []} if "merges" in model else {})}
    from tokenizers import Tokenizer

    try:
        pipeline = Tokenizer.from_str(json.dumps({**doc, "model": skeleton, "added_tokens": []}))
    except Exception:  # a part tokenizers rejects: the full read says which
        return None
    canonical = json.loads(pipeline.to_str())
    canonical["model"]["vocab"] = model["vocab"]
    if "merges" in canonical["model"]:
        canonical["model"]["merges"] = merges
    canonical["added_tokens"] = added
    return canonical


def _vocab(model: dict) -> dict[str, int] | None:
    """token -> id of a BPE, WordPiece or WordLevel vocabulary whose ids tokenizers keeps as
    they are (dense, unique); None otherwise. Unigram vocabularies take the full round trip:
    tokenizers re-reads their scores a bit off, and the document must carry its values."""
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        return None
    values = set(vocab.values())
    dense = all(type(i) is int for i in values) and values == set(range(len(vocab)))
    return vocab if dense else None


def _merges(merges: Any, vocab: dict[str, int] | None) -> list[list[str]] | None:
    """Merges as the pairs tokenizers writes ("a b" strings are the older spelling), where
    tokenizers reads each one (both parts in the vocabulary)."""
    if vocab is None or not isinstance(merges, list):
        return None
    pairs = [m.split(" ") if isinstance(m, str) else m for m in merges]
    if all(type(p) is list and len(p) == 2 and p[0] in vocab and p[1] in vocab for p in pairs):
        return pairs
    return None


def _added(added: Any, vocab: dict[str, int] | None) -> list[dict] | None:
    """The added tokens, where their ids are those tokenizers assigns reading them (a token of
    the vocabulary keeps its id, the others follow the vocabulary in order) and their entries
    are complete."""
    if vocab is None or not isinstance(added, list):
        return None
    following, last = len(vocab), -1
    seen = set()
    for entry in added:  # in id order, as tokenizers writes them
        if not (isinstance(entry, dict) and set(entry) == set(ADDED_KEYS)):
            return None
        content = entry["content"]
        expected = vocab.get(content, following)
        if content in seen or entry["id"] != expected or expected <= last:
            return None
        seen.add(content)
        following += content not in vocab
        last = expected
    return [{key: entry[key] for key in ADDED_KEYS} for entry in added]
