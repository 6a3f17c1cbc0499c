"""tiktoken rank files (Llama-3's `original/tokenizer.model`): read, converted, written.

A shrunk rank file mirrors the tiny tokenizer.json exactly (same tokens, same ids), so
`tiktoken.Encoding` and the fast tokenizer agree. SentencePiece `.model` files, the other
non-JSON format, are tinykit.tokenizer.sp_model's.
"""

from __future__ import annotations

import base64
from collections.abc import Set as AbstractSet
from pathlib import Path

from tinykit.errors import UsageError

TIKTOKEN_NAMES = ("original/tokenizer.model", "tokenizer.model")
# Llama-3's pre-tokenizer pattern (meta-llama/llama3 tokenizer.py).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def read_tiktoken(path: Path) -> dict[bytes, int] | None:
    """`{token bytes: rank}` from a tiktoken file (`<base64> <rank>` lines), or None."""
    try:
        lines = path.read_text("ascii").split()
    except (UnicodeDecodeError, ValueError):
        return None
    if len(lines) < 512 or len(lines) % 2:
        return None
    try:
        return {
            base64.b64decode(tok, validate=True): int(rank)
            for tok, rank in zip(lines[::2], lines[1::2], strict=True)
        }
    except ValueError:
        return None


def _byte_encoder() -> dict[int, str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return bytes_to_unicode()


def tiktoken_to_json(ranks: dict[bytes, int], limit: int, pattern: str = LLAMA3_PATTERN) -> dict:
    """A byte-level BPE tokenizer.json for the `limit` lowest-ranked tokens of a tiktoken file.

    Merges are derived from the ranks as transformers' TikTokenConverter does, but only over
    the kept tokens, so no `tiktoken` install is needed.
    """
    import json

    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE

    by_rank = sorted(ranks.items(), key=lambda kv: kv[1])
    singles = [tok for tok, _ in by_rank if len(tok) == 1]
    if len(singles) < 256:
        raise UsageError(
            f"tiktoken file has {len(singles)} single-byte tokens, 256 expected. "
            "It is not a byte-level BPE rank file. Pass the folder of a Llama-3-style "
            "original/tokenizer.model."
        )
    kept = [tok for tok, _ in by_rank[:limit]]
    kept_set = set(kept) | set(singles)
    kept = sorted(kept_set, key=ranks.__getitem__)
    enc = _byte_encoder()

    def text(b: bytes) -> str:
        return "".join(enc[x] for x in b)

    vocab = {text(tok): i for i, tok in enumerate(kept)}
    merges = []
    for tok in kept:
        splits = [
            (tok[:i], tok[i:])
            for i in range(1, len(tok))
            if tok[:i] in kept_set and tok[i:] in kept_set
        ]
        splits.sort(key=lambda ab: (ranks[ab[0]], ranks[ab[1]]))
        merges += [(text(a), text(b)) for a, b in splits]
    built = Tokenizer(BPE(vocab, merges, fuse_unk=False, ignore_merges=True))
    built.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    built.decoder = decoders.ByteLevel()
    built.post_processor = processors.ByteLevel(trim_offsets=False)
    return json.loads(built.to_str())


def write_tiktoken(
    dest: Path, new_vocab: list[str], special: AbstractSet[str] = frozenset()
) -> None:
    """Write the byte-level model vocab (by new id) as a tiktoken rank file, specials left out."""
    dec = {c: b for b, c in _byte_encoder().items()}
    lines = []
    for rank, tok in enumerate(new_vocab):
        if tok in special:  # tiktoken files hold mergeable ranks only (GPT-2's <|endoftext|>)
            continue
        raw = bytes(dec[c] for c in tok)
        lines.append(f"{base64.b64encode(raw).decode()} {rank}\n")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(lines), "ascii")


def with_specials(tj: dict, bos: str | None, eos: str | None = None) -> dict:
    """`tj` whose post-processor puts `bos` before and `eos` after each sequence (either may be
    None), byte-level offsets kept: what transformers' conversion of a Llama-3 tiktoken file
    writes, and what a tokenizer config's add_bos_token / add_eos_token ask for."""
    ids = {a["content"]: a["id"] for a in tj.get("added_tokens", [])}
    bos, eos = (t if t in ids else None for t in (bos, eos))

    def template(seq: str, type_id: int) -> list[dict]:
        def special(token: str) -> dict:
            return {"SpecialToken": {"id": token, "type_id": type_id}}

        middle = [{"Sequence": {"id": seq, "type_id": type_id}}]
        return ([special(bos)] if bos else []) + middle + ([special(eos)] if eos else [])

    single = template("A", 0)
    specials = {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in (bos, eos) if t}
    processor = {
        "type": "TemplateProcessing",
        "single": single,
        "pair": single + template("B", 1),
        "special_tokens": specials,
    }
    old = tj.get("post_processor") or {}
    steps = old.get("processors", [old]) if old.get("type") == "Sequence" else [old]
    byte_level = [p for p in steps if p and p.get("type") == "ByteLevel"]
    return {**tj, "post_processor": {"type": "Sequence", "processors": [*byte_level, processor]}}
