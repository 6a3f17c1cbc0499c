"""Shrink a `tokenizers` JSON document (tokenizer.json) by structured editing, never regex.

The source's ids are renumbered compactly in their old order, so low special ids (Llama's
`<s>` = 1, BERT's `[CLS]`) stay low and the tail ones (GPT-2's `<|endoftext|>` at 50256, Qwen's
chat tokens at 151643+) land at the end of the new id space. Everything that names an id is
rewritten from the same map: the model vocab, merges, `added_tokens`, the post-processor,
padding, and Unigram's `unk_id`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from tinykit.errors import ShrinkConstraintError, UnsupportedModelError

BYTE_FALLBACK_PIECES = tuple(f"<0x{b:02X}>" for b in range(256))
# Single characters kept before the rest of the vocab by id, so plain ASCII text never turns
# into unknown tokens (BERT's first ~1000 ids are `[unused*]`, T5's characters sit at the end).
_ASCII = [chr(c) for c in range(32, 127)]


def byte_level_alphabet() -> list[str]:
    """The 256 printable stand-ins GPT-2-style byte-level BPE uses for raw bytes."""
    from tokenizers.pre_tokenizers import ByteLevel

    return sorted(ByteLevel.alphabet())


def _mentions(node: Any, type_name: str) -> bool:
    return type_name in json.dumps(node) if node else False


def model_type(model: dict) -> str:
    """The model's type; files written by tokenizers < 0.14 omit it, so infer it from the keys."""
    if model.get("type"):
        return model["type"]
    if "merges" in model:
        return "BPE"
    if isinstance(model.get("vocab"), list):
        return "Unigram"
    return "WordPiece" if "continuing_subword_prefix" in model else "WordLevel"


# The tokenizer kinds `tokenizer_kind` tells apart: the model type, and how it spells text
# its vocab lacks (every byte is a token; unknown characters become <0xNN> byte pieces).
BYTE_LEVEL_BPE = "byte-level-bpe"
BYTE_FALLBACK_BPE = "byte-fallback-bpe"
BPE = "bpe"
BYTE_FALLBACK_UNIGRAM = "byte-fallback-unigram"
UNIGRAM = "unigram"
WORDPIECE = "wordpiece"
WORDLEVEL = "wordlevel"


def tokenizer_kind(tj: dict) -> str:
    """One of the kinds above."""
    model = tj["model"]
    mtype = model_type(model)
    if mtype == "BPE":
        if model.get("byte_fallback"):
            return BYTE_FALLBACK_BPE
        if _mentions(tj.get("pre_tokenizer"), '"ByteLevel"') or _mentions(
            tj.get("decoder"), '"ByteLevel"'
        ):
            return BYTE_LEVEL_BPE
        return BPE
    if mtype == "Unigram":
        return BYTE_FALLBACK_UNIGRAM if model.get("byte_fallback") else UNIGRAM
    if mtype in ("WordPiece", "WordLevel"):
        return mtype.lower()
    raise UnsupportedModelError(
        f"tokenizer model type {mtype!r} cannot be shrunk by editing. "
        "tinykit edits BPE, Unigram, WordPiece and WordLevel models. "
        "Retrain instead: make_tiny_tokenizer(..., method='retrain')."
    )


def model_vocab(tj: dict) -> list[str]:
    """The model's vocab as a list indexed by id."""
    model = tj["model"]
    if model_type(model) == "Unigram":
        return [piece for piece, _score in model["vocab"]]
    vocab = model["vocab"]
    if list(vocab.values()) == list(range(len(vocab))):  # as tokenizers writes it: no sort
        return list(vocab)
    return [tok for tok, _id in sorted(vocab.items(), key=lambda kv: kv[1])]


def vocab_size(tj: dict) -> int:
    """Number of ids: the model vocab plus added tokens outside it."""
    ids = set(range(len(tj["model"]["vocab"])))
    return len(ids | {a["id"] for a in tj.get("added_tokens", [])})


def pad_added_tokens(tj: dict, size: int) -> dict:
    """`tj` with unused special tokens `<|tinykit_pad_N|>` at the free ids below `size`, so that
    it has exactly `size` ids (a model vocab the Hub's tests count on, say)."""
    taken = set(range(len(tj["model"]["vocab"]))) | {a["id"] for a in tj.get("added_tokens", [])}
    pads = [
        {
            "id": i,
            "content": f"<|tinykit_pad_{i}|>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i in range(size)
        if i not in taken
    ]
    added = sorted([*tj.get("added_tokens", []), *pads], key=lambda a: a["id"])
    return {**tj, "added_tokens": added}


def unk_token(tj: dict) -> str | None:
    model = tj["model"]
    if model_type(model) == "Unigram":
        return None if model.get("unk_id") is None else model_vocab(tj)[model["unk_id"]]
    return model.get("unk_token")


def _required_base(tj: dict, kind: str, vocab: _Present) -> list[str]:
    unk = unk_token(tj)
    required: list[str] = [unk] if unk else []
    if kind == BYTE_LEVEL_BPE:
        required += byte_level_alphabet()
    elif kind in (BYTE_FALLBACK_BPE, BYTE_FALLBACK_UNIGRAM):
        required += BYTE_FALLBACK_PIECES
    suffix = tj["model"].get("end_of_word_suffix")
    if suffix:  # CLIP: a word's last character only exists as "c</w>"
        required += [c + suffix for c in _ASCII if c != " "]
    return [t for t in required if t in vocab]


def _preferred_base(tj: dict, kind: str) -> list[str]:
    if kind == BYTE_LEVEL_BPE:
        return []  # the byte alphabet already covers every input
    if kind == WORDPIECE:
        prefix = tj["model"].get("continuing_subword_prefix") or "##"
        return _ASCII + [prefix + c for c in _ASCII]
    # SentencePiece-style vocabs: without the word marker itself, byte fallback would spell
    # it as three bytes that the decoder's ▁ -> space step never sees.
    return ["\u2581", *_ASCII, *("\u2581" + c for c in _ASCII)]


def choose_tokens(
    tj: dict,
    vocab: int,
    essential: set[str],
    *,
    optional_share: float = 0.125,
    base: list[str] | None = None,
) -> tuple[list[int], list[str]]:
    """Pick the old ids to keep (sorted) and the added tokens dropped, for a `vocab`-sized result.

    Added tokens named in `essential` (special tokens, chat-template and config references) are
    always kept; other added tokens fill at most `optional_share` of the vocab, in id order.
    """
    kind = tokenizer_kind(tj)
    base = model_vocab(tj) if base is None else base
    added = sorted(tj.get("added_tokens", []), key=lambda a: a["id"])
    added_content = {a["content"] for a in added}
    must = [a for a in added if a["content"] in essential]
    if len(must) > vocab // 2:
        raise ShrinkConstraintError(
            f"tokenizer needs {len(must)} special tokens, more than half of --vocab {vocab}. "
            "The special tokens (named in tokenizer_config.json, the chat template or config.json) "
            f"must all be kept. Pass --vocab {max(1024, 4 * len(must))} or more.",
            field="vocab",
            value=vocab,
            constraint=f">= {2 * len(must)}",
        )
    room = max(0, int(vocab * optional_share) - len(must))
    optional = [a for a in added if a["content"] not in essential][:room]
    kept_added = sorted(must + optional, key=lambda a: a["id"])
    kept_contents = {a["content"] for a in kept_added}
    dropped = [a["content"] for a in added if a["content"] not in kept_contents]

    base_ids = _ids(tj, base)
    present = _Present(base_ids, added_content)
    required = _required_base(tj, kind, present)
    slots = vocab - len(kept_added)
    if slots < len(required):
        raise ShrinkConstraintError(
            f"--vocab {vocab} is too small for this {kind} tokenizer. It needs {len(required)} "
            f"base tokens (unknown token and byte coverage) plus {len(kept_added)} special tokens. "
            f"Pass --vocab {len(required) + len(kept_added) + 64} or more.",
            field="vocab",
            value=vocab,
            constraint=f">= {len(required) + len(kept_added)}",
        )
    chosen: dict[str, None] = {}
    candidates = (t for t in base if t not in added_content)  # read only until the slots fill
    for tok in _ordered(required, _preferred_base(tj, kind), candidates, present):
        if len(chosen) >= slots:
            break
        chosen.setdefault(tok)
    kept = sorted({base_ids[t] for t in chosen} | {a["id"] for a in kept_added})
    return kept, dropped


class _Present:
    """The base tokens that are not added tokens, without a 150k-entry set of them."""

    def __init__(self, ids: dict[str, int], added: set[str]) -> None:
        self.ids, self.added = ids, added

    def __contains__(self, token: object) -> bool:
        return token in self.ids and token not in self.added


def _ids(tj: dict, base: list[str]) -> dict[str, int]:
    """token -> position in `base`: the model's own vocab where it already is that."""
    vocab = tj["model"]["vocab"]
    if isinstance(vocab, dict) and list(vocab.values()) == list(range(len(vocab))):
        return vocab
    return {tok: i for i, tok in enumerate(base)}


def _ordered(
    required: list[str], preferred: list[str], by_id: Iterable[str], present: _Present
) -> Iterable[str]:
    yield from required
    yield from (t for t in preferred if t in present)
    yield from by_id


def rebuild(
    tj: dict, kept_old_ids: list[int], base: list[str] | None = None
) -> tuple[dict, dict[int, int]]:
    """A copy of `tj` holding only `kept_old_ids`, renumbered 0..n-1 in old order.

    Returns the new document and the old -> new id map of every kept id.
    """
    # deep-copy all but the model, whose big vocab and merges are rebuilt below anyway
    new = {k: json.loads(json.dumps(v)) for k, v in tj.items() if k != "model"}
    model = new["model"] = {**tj["model"], "type": model_type(tj["model"])}
    base = model_vocab(tj) if base is None else base
    old_to_new = {old: i for i, old in enumerate(kept_old_ids)}
    by_content = {}
    for old, new_id in old_to_new.items():
        if old < len(base):
            by_content[base[old]] = new_id
    for a in new.get("added_tokens", []):
        if a["id"] in old_to_new:
            by_content[a["content"]] = old_to_new[a["id"]]
    model_ids = [old for old in kept_old_ids if old < len(base)]
    if model_ids and max(old_to_new[o] for o in model_ids) >= len(model_ids):
        raise UnsupportedModelError(
            "tokenizer.json has added tokens with ids inside the model vocab range. "
            "tinykit needs added-only tokens after the model vocab, as tokenizers writes them. "
            "Retrain instead: make_tiny_tokenizer(..., method='retrain')."
        )

    if model["type"] == "Unigram":
        model["vocab"] = [tj["model"]["vocab"][old] for old in model_ids]
        if model.get("unk_id") is not None:
            model["unk_id"] = old_to_new[model["unk_id"]]
    else:
        model["vocab"] = {base[old]: old_to_new[old] for old in model_ids}
    if model["type"] == "BPE":
        model["merges"] = _kept_merges(model.get("merges", []), set(model["vocab"]))

    new["added_tokens"] = [
        {**a, "id": old_to_new[a["id"]]}
        for a in new.get("added_tokens", [])
        if a["id"] in old_to_new
    ]
    new["post_processor"] = _remap_processor(new.get("post_processor"), by_content)
    if new.get("padding") and new["padding"].get("pad_token") in by_content:
        new["padding"]["pad_id"] = by_content[new["padding"]["pad_token"]]
    return new, old_to_new


def _kept_merges(merges: list, kept: set[str]) -> list[list[str]]:
    """Merges whose two parts and result are all kept; accepts `"a b"` and `["a", "b"]` forms."""
    kinds = set(map(type, merges))
    if kinds <= {list}:  # as tokenizers writes them: no split to do
        return [[a, b] for a, b in merges if a in kept and b in kept and a + b in kept]
    if kinds <= {str}:  # merges.txt's lines: matched whole, none split
        lines = _lines_making(kept)
        merges = [m for m in merges if m in lines]
    pairs = (merge.split(" ", 1) if isinstance(merge, str) else merge for merge in merges)
    return [[a, b] for a, b in pairs if a in kept and b in kept and a + b in kept]


def _lines_making(kept: set[str]) -> set[str]:
    """Every `"a b"` merge line that makes a kept token of two kept ones. A thousand kept tokens
    give a few thousand lines, so the 150k lines of a real merges.txt are looked up, not split
    (only the lines found are split, and checked, as tokenizers reads them)."""
    return {f"{t[:k]} {t[k:]}" for t in kept for k in range(1, len(t)) if {t[:k], t[k:]} <= kept}


def _remap_processor(proc: dict | None, ids: dict[str, int]) -> dict | None:
    if not proc:
        return proc
    proc_type = proc.get("type")
    if proc_type == "Sequence":
        proc["processors"] = [_remap_processor(p, ids) for p in proc["processors"]]
    elif proc_type == "TemplateProcessing":
        for name, spec in proc.get("special_tokens", {}).items():
            spec["ids"] = [_must(ids, tok, name) for tok in spec["tokens"]]
    elif proc_type in ("RobertaProcessing", "BertProcessing"):
        for key in ("sep", "cls"):
            tok = proc[key][0]
            proc[key] = [tok, _must(ids, tok, key)]
    return proc


def _must(ids: dict[str, int], tok: str, where: str) -> int:
    if tok not in ids:
        raise UnsupportedModelError(
            f"post-processor token {tok!r} ({where}) was dropped from the tiny vocab. "
            "Every post-processor token must be kept as a special token. "
            "Report this with the source tokenizer.json; use method='retrain' meanwhile."
        )
    return ids[tok]


def processor_tokens(tj: dict) -> set[str]:
    """Token strings the post-processor inserts (they must survive the shrink)."""
    found: set[str] = set()

    def walk(proc: dict | None) -> None:
        if not proc:
            return
        for p in proc.get("processors", []):
            walk(p)
        for spec in proc.get("special_tokens", {}).values():
            found.update(spec["tokens"])
        for key in ("sep", "cls"):
            if key in proc:
                found.add(proc[key][0])

    walk(tj.get("post_processor"))
    return found


def drop_precompiled_normalizer(tj: dict) -> dict:
    """Remove SentencePiece's precompiled charsmap (237 KB for T5) so the files stay tiny."""
    norm = tj.get("normalizer")
    if not norm:
        return tj
    if norm.get("type") == "Precompiled":
        tj["normalizer"] = None
    elif norm.get("type") == "Sequence":
        kept = [n for n in norm["normalizers"] if n.get("type") != "Precompiled"]
        norm["normalizers"] = kept
        if not kept:
            tj["normalizer"] = None
    return tj


def shrink_json(
    tj: dict, vocab: int, essential: set[str], *, base: list[str] | None = None
) -> tuple[dict, dict[int, int], list[str]]:
    """Shrink to at most `vocab` ids. Returns (document, old -> new ids, dropped added tokens).
    `base`: `model_vocab(tj)` where the caller has it (150k tokens are listed once)."""
    unk = unk_token(tj)
    essential = set(essential) | processor_tokens(tj) | ({unk} if unk is not None else set())
    base = model_vocab(tj) if base is None else base
    kept, dropped = choose_tokens(tj, vocab, essential, base=base)
    new, old_to_new = rebuild(tj, kept, base)
    return drop_precompiled_normalizer(new), old_to_new, dropped


def place_tokens(tj: dict, at: dict[int, str]) -> dict:
    """`tj` with each added-only token of `at` moved into the model vocab at its id there, where
    that id holds a plain token (not added, not the unknown token); the plain token moves to the
    model vocab's end. A trained tokenizer so keeps the ids a model config names (a pad id 1 also
    indexes RoBERTa-style position tables of max_position_embeddings rows), as `rebuild` keeps a
    source's. Sizes and every other token's string are unchanged."""
    base = model_vocab(tj)
    added = tj.get("added_tokens", [])
    fixed = {a["content"] for a in added} | {unk_token(tj)}
    in_base = set(base)
    size = len(base)
    for i, token in sorted(at.items()):
        if token not in in_base and i < size and base[i] not in fixed:
            base.append(base[i])
            base[i] = token
            fixed.add(token)
    if len(base) == size:
        return tj
    model = tj["model"]
    if model_type(model) == "Unigram":
        scores = dict(model["vocab"])
        model["vocab"] = [[t, scores.get(t, 0.0)] for t in base]
    else:
        model["vocab"] = {t: i for i, t in enumerate(base)}
    ids = {t: i for i, t in enumerate(base)}
    rest = sorted((a for a in added if a["content"] not in ids), key=lambda a: a["id"])
    ids.update({a["content"]: len(base) + n for n, a in enumerate(rest)})
    tj["added_tokens"] = sorted(
        ({**a, "id": ids[a["content"]]} for a in added), key=lambda a: a["id"]
    )
    tj["post_processor"] = _remap_processor(tj.get("post_processor"), ids)
    if tj.get("padding") and tj["padding"].get("pad_token") in ids:
        tj["padding"]["pad_id"] = ids[tj["padding"]["pad_token"]]
    return tj
