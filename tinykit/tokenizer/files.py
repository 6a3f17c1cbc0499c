"""The two non-JSON vocab formats: SentencePiece `.model` protobufs and tiktoken rank files.

Both are shrunk to mirror the tiny tokenizer.json exactly (same pieces, same ids), so the slow
loaders (`sentencepiece.SentencePieceProcessor`, `tiktoken.Encoding`) and the fast one agree.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Set as AbstractSet
from pathlib import Path

from tinykit.errors import UsageError

SENTENCEPIECE_NAMES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model")
TIKTOKEN_NAMES = ("original/tokenizer.model", "tokenizer.model")
# Llama-3's pre-tokenizer pattern (meta-llama/llama3 tokenizer.py).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _model_proto():
    # The pure-Python protobuf backend parses these files faster and avoids the upb clash
    # with other vendored copies of sentencepiece_model.proto (field guide §2, method D).
    os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
    from sentencepiece import sentencepiece_model_pb2

    return sentencepiece_model_pb2.ModelProto()


def read_sentencepiece(path: Path):
    """The parsed ModelProto, or None when `path` is not a SentencePiece protobuf."""
    proto = _model_proto()
    try:
        proto.ParseFromString(path.read_bytes())
    except Exception:  # tiktoken text files and other formats are not protobufs
        return None
    return proto if len(proto.pieces) else None


def shrink_sentencepiece(src: Path, dest: Path, new_vocab: list[str]) -> bool:
    """Write `dest` keeping the pieces of `new_vocab` (the tiny model vocab, by new id).

    Tokens that are not SentencePiece pieces (T5's `<extra_id_*>`, added on top by the wrapper)
    must come after every piece, as in the source; otherwise ids would disagree and nothing is
    written (returns False).
    """
    proto = read_sentencepiece(src)
    if proto is None:
        return False
    by_piece = {p.piece: p for p in proto.pieces}
    n = 0
    while n < len(new_vocab) and new_vocab[n] in by_piece:
        n += 1
    if any(tok in by_piece for tok in new_vocab[n:]):
        return False
    special_ids = {}
    for field in ("unk_id", "bos_id", "eos_id", "pad_id"):
        old = getattr(proto.trainer_spec, field)
        if 0 <= old < len(proto.pieces):
            special_ids[field] = proto.pieces[old].piece
    kept = [by_piece[tok] for tok in new_vocab[:n]]
    del proto.pieces[:]
    proto.pieces.extend(kept)
    new_ids = {p.piece: i for i, p in enumerate(proto.pieces)}
    for field, piece in special_ids.items():
        setattr(proto.trainer_spec, field, new_ids.get(piece, -1))
    proto.trainer_spec.vocab_size = len(kept)
    # The nmt_nfkc charsmap alone is 237 KB for T5: the tiny model normalises nothing.
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.precompiled_charsmap = b""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(proto.SerializeToString())
    return True


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
