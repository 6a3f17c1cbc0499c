"""A tokenizer.json read into the document `tokenizers` writes, without building its model.

`json.loads(Tokenizer.from_file(path).to_str())` gives the canonical document (defaults
filled in, merges as pairs, ids as tokenizers assigns them), but builds the whole model first
and writes it out again: for a 32k-150k token BPE that is most of a tiny build. Here only the
pipeline (normalizer, pre-tokenizer, post-processor, decoder, the model's options) goes through
`tokenizers`, with the vocabulary emptied; the vocabulary, merges and added tokens come from
the file where they already have the canonical form. A file where they do not (ids with holes,
added tokens tokenizers would renumber, a merge it would not read) takes the full round trip,
which also names what is wrong with a broken file.

A Unigram vocabulary is read the same way, its scores as tokenizers reads them (`_serde_float`).

A vocab.json + merges.txt folder is read the same way: its class is built with an empty
vocabulary (pipeline, model options and added tokens as the class makes them) and the
vocabulary and merges come from the files, where that gives the document the full read would.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain, repeat
from operator import contains, eq, itemgetter
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
    try:  # floats as tokenizers reads them; NaN and Infinity it does not read at all
        doc = json.loads(data, parse_float=_serde_float, parse_constant=_not_json)
    except ValueError:
        return None
    model = doc.get("model") if isinstance(doc, dict) else None
    if not isinstance(model, dict):
        return None
    unigram = _unigram(model)
    ids = unigram[0] if unigram is not None else _vocab(model)
    merges = _merges(model.get("merges"), ids) if "merges" in model else []
    added = _added(doc.get("added_tokens", []), ids)
    if ids is None or merges is None or added is None:
        return None
    # the pipeline built over an empty vocabulary (Unigram's keeps its pieces up to unk_id)
    empty = unigram[1] if unigram is not None else {}
    skeleton = {**model, "vocab": empty, **({"merges": []} if "merges" in model else {})}
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


def read_vocab_merges(folder: Path, cls: Any, *, whole: bool = True) -> dict | None:
    """The document `cls.from_pretrained(folder)` gives for a vocab.json + merges.txt folder,
    without building its BPE; None where the quick read might differ (the caller then takes the
    full one): ids with holes, a merge line tokenizers would not read, a post-processor that
    names token ids, added tokens tokenizers would number otherwise. Its merges keep merges.txt's
    `"a b"` spelling, which tokenizer.json takes too (splitting 150k lines into pairs cost more
    than the rest of the read). `whole=False`, for a shrink: a merge's parts are looked up in the
    vocabulary only where the shrink keeps the merge (a damaged line it drops is no error)."""
    with _no_collection():
        return _quick_vocab_files(folder, cls, whole)


def _quick_vocab_files(folder: Path, cls: Any, whole: bool) -> dict | None:
    try:
        vocab = json.loads((folder / "vocab.json").read_bytes())
        text = (folder / "merges.txt").read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    ids = _vocab({"vocab": vocab})
    merges = _merge_lines(text)
    if ids is None or merges is None or (whole and not _in_vocab(merges, ids)):
        return None
    try:  # the class's own pipeline and added tokens, its model built empty
        empty = cls.from_pretrained(folder, vocab={}, merges=[])
    except Exception:  # the full read says what is wrong
        return None
    doc = json.loads(empty.backend_tokenizer.to_str())
    added = _renumbered(doc["added_tokens"], ids)
    model = doc["model"]
    if model.get("type") != "BPE" or _names_ids(doc.get("post_processor")) or added is None:
        return None
    if len(ids) <= len(added) + 3:  # too few tokens: the full read explains
        return None
    in_order = all(map(eq, ids.values(), range(len(ids))))
    model["vocab"] = ids if in_order else dict(sorted(ids.items(), key=itemgetter(1)))
    model["merges"] = merges
    doc["added_tokens"] = added
    return doc


def _merge_lines(text: str) -> list[str] | None:
    """merges.txt's merges ("a b" lines after a "#version" header); None for anything else:
    carriage returns, a header further down, a line that is not two parts around one space
    (the full read decides). Checked with counts and maps rather than a loop: there are 150k."""
    if "\r" in text:
        return None
    if text.startswith("#version"):
        text = text.partition("\n")[2]
    if "\n#version" in text or text.startswith("#version"):
        return None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    # a space on every line and as many spaces as lines: exactly one each
    if text.count(" ") != len(lines) or not all(map(contains, lines, repeat(" "))):
        return None
    return lines


def _in_vocab(lines: list[str], vocab: dict[str, int]) -> bool:
    """Whether both parts of every `"a b"` merge are tokens of `vocab`."""
    parts = list(map(str.partition, lines, repeat(" ")))
    return vocab.keys() >= set(map(itemgetter(0), parts)) | set(map(itemgetter(2), parts))


def _names_ids(part: Any) -> bool:
    """True where a pipeline part names token ids (a template's special tokens, a cls/sep
    pair): an empty vocabulary gives them other ids than the real one."""
    if isinstance(part, dict):
        if part.get("special_tokens") or "cls" in part or "sep" in part:
            return True
        return any(_names_ids(v) for v in part.values())
    return isinstance(part, list) and any(_names_ids(v) for v in part)


def _renumbered(added: list[dict], vocab: dict[str, int]) -> list[dict] | None:
    """Added tokens numbered as tokenizers numbers them over `vocab` (in the order they were
    added: one of the vocabulary keeps its id, the others follow it); None where that order
    would change, or a token repeats."""
    following, last, out = len(vocab), -1, []
    for entry in added:
        new = vocab.get(entry["content"], following)
        if new <= last:
            return None
        following += entry["content"] not in vocab
        last = new
        out.append({**entry, "id": new})
    return out


def _vocab(model: dict) -> dict[str, int] | None:
    """token -> id of a BPE, WordPiece or WordLevel vocabulary whose ids tokenizers keeps as
    they are (dense, unique); None otherwise. Checked with set and map: 150k entries."""
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not set(map(type, vocab.values())) <= {int}:
        return None
    size = len(vocab)
    if list(vocab.values()) == list(range(size)):  # the usual file: in id order
        return vocab
    return vocab if set(vocab.values()) == set(range(size)) else None


def _unigram(model: dict) -> tuple[dict[str, int], list] | None:
    """A Unigram vocabulary's piece -> id, and its pieces up to unk_id (tokenizers builds no
    Unigram without its unknown piece); None for anything but distinct pieces with float
    scores and an unk_id among them."""
    vocab, unk = model.get("vocab"), model.get("unk_id")
    if model.get("type", "Unigram") != "Unigram" or not isinstance(vocab, list):
        return None
    if not set(map(type, vocab)) <= {list} or not set(map(len, vocab)) <= {2}:
        return None
    pieces = list(map(itemgetter(0), vocab))
    scores = map(itemgetter(1), vocab)
    if not set(map(type, pieces)) <= {str} or not set(map(type, scores)) <= {float}:
        return None  # an integer score: tokenizers writes it as a float, -0 included
    ids = {piece: i for i, piece in enumerate(pieces)}
    if len(ids) != len(vocab) or not (unk is None or (type(unk) is int and 0 <= unk < len(ids))):
        return None
    return ids, vocab[: 0 if unk is None else unk + 1]


# serde_json, as tokenizers builds it (without float_roundtrip), reads a number's digits as
# one integer, rounds that to f64 once, then multiplies or divides by one power of ten: a
# 17-digit score (an f32 printed as f64) can land one ulp away from Python's correctly
# rounded float. Its table of powers holds the correctly rounded 1e0 .. 1e308.
_POW10 = tuple(float(f"1e{k}") for k in range(309))
_NUMBER = re.compile(r"-?(\d+)(?:\.(\d+))?(?:[eE]([-+]?\d+))?")


def _serde_float(text: str) -> float:
    """The f64 tokenizers reads from the JSON number `text`; ValueError where serde_json takes
    another path (more than 19 digits, an exponent past 1e308) and the full read must decide."""
    if len(text) <= 16 and "e" not in text and "E" not in text:
        return float(text)  # <= 15 digits, <= 15 decimals: one exact operation, as Python's
    if "e" in text or "E" in text:
        found = _NUMBER.fullmatch(text)
        if found is None:
            raise ValueError(text)
        whole, fraction, exponent = found.groups(default="")
    else:  # the usual score: "-7.2543206214904785"
        (whole, _, fraction), exponent = text.lstrip("-").partition("."), ""
    significand = int(whole + fraction)
    scale = int(exponent or 0) - len(fraction)
    if significand >= 10**19 or abs(scale) > 308:
        raise ValueError(text)
    value = (
        float(significand) * _POW10[scale] if scale >= 0 else float(significand) / _POW10[-scale]
    )
    if value == float("inf"):
        raise ValueError(text)
    return -value if text.startswith("-") else value


def _not_json(text: str) -> float:
    raise ValueError(text)


def _merges(merges: Any, vocab: dict[str, int] | None) -> list[list[str]] | None:
    """Merges as the pairs tokenizers writes ("a b" strings are the older spelling), where
    tokenizers reads each one (both parts in the vocabulary). Checked with set and map."""
    if vocab is None or not isinstance(merges, list):
        return None
    kinds = set(map(type, merges))
    if kinds <= {list}:
        pairs = merges
    elif kinds <= {str}:
        pairs = list(map(str.split, merges, repeat(" ")))
    elif kinds <= {list, str}:
        pairs = [m.split(" ") if isinstance(m, str) else m for m in merges]
    else:
        return None
    try:
        if set(map(len, pairs)) <= {2} and vocab.keys() >= set(chain.from_iterable(pairs)):
            return pairs
    except TypeError:  # a part that is not a string: the full read says what is wrong
        pass
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
