"""SentencePiece `.model` files, read and shrunk at the protobuf wire level.

A model file is a `sentencepiece.ModelProto`: a flat list of fields, one per piece, then the
trainer and normalizer specs. The pure-Python protobuf runtime takes about a second to parse
T5's 32,000 pieces, and its C runtime (upb) clashes with the other copies of
sentencepiece_model.proto (transformers vendors one). Shrinking changes only the pieces, four
special ids, the vocab size and the normalizer, so tinykit reads and writes those fields itself:
every other field, and every kept piece, is copied byte for byte in the source's order. The
result is what `ModelProto.SerializeToString()` writes after the same edits.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

SENTENCEPIECE_NAMES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model")

# Field numbers of sentencepiece_model.proto.
_PIECES, _TRAINER, _NORMALIZER = 1, 2, 3  # ModelProto
_PIECE = 1  # ModelProto.SentencePiece
_VOCAB_SIZE = 4  # TrainerSpec
# TrainerSpec's unk_id, bos_id, eos_id and pad_id, with the defaults the proto declares.
_SPECIAL_ID_DEFAULTS = {40: 0, 41: 1, 42: 2, 43: -1}
_NAME, _CHARSMAP = 1, 2  # NormalizerSpec

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


class _NotProtobuf(ValueError):
    pass


class _Field(NamedTuple):
    number: int
    raw: bytes  # the whole entry: key and value, as in the file
    value: int | bytes  # a varint's value, or a length-delimited field's payload


def _varint(data: bytes, i: int) -> tuple[int, int]:
    """The varint at `data[i:]` and the index after it."""
    result = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise _NotProtobuf("truncated varint")
        byte = data[i]
        i += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, i
        shift += 7


def _encode_varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int32s take ten bytes, as protobuf writes them
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(data: bytes, i: int) -> tuple[_Field, int]:
    """The field at `data[i:]` and the index after it; raises _NotProtobuf on malformed input."""
    start = i
    key, i = _varint(data, i)
    number, wire = key >> 3, key & 7
    value: int | bytes = b""
    if wire == _BYTES:
        size, i = _varint(data, i)
        value, i = data[i : i + size], i + size
    elif wire == _VARINT:
        value, i = _varint(data, i)
    elif wire in (_FIXED32, _FIXED64):
        i += 4 if wire == _FIXED32 else 8
    else:
        raise _NotProtobuf(f"wire type {wire}")
    if number == 0 or i > len(data):
        raise _NotProtobuf("truncated field")
    return _Field(number, data[start:i], value), i


def _fields(data: bytes) -> list[_Field]:
    """The fields of one message, in file order."""
    fields, i = [], 0
    while i < len(data):
        field, i = _field(data, i)
        fields.append(field)
    return fields


def _entry(number: int, value: int | bytes) -> _Field:
    if isinstance(value, int):
        return _Field(number, _encode_varint(number << 3 | _VARINT) + _encode_varint(value), value)
    key = _encode_varint(number << 3 | _BYTES) + _encode_varint(len(value))
    return _Field(number, key + value, value)


def _with(fields: list[_Field], number: int, value: int | bytes) -> list[_Field]:
    """`fields` with field `number` set to `value`: in place if present, else before the first
    higher-numbered field (protobuf writes fields in number order)."""
    new = _entry(number, value)
    if any(f.number == number for f in fields):
        first = next(i for i, f in enumerate(fields) if f.number == number)
        rest = [f for f in fields[first:] if f.number != number]
        return [*fields[:first], new, *rest]
    at = next((i for i, f in enumerate(fields) if f.number > number), len(fields))
    return [*fields[:at], new, *fields[at:]]


def _payload(field: _Field) -> bytes:
    if not isinstance(field.value, bytes):
        raise _NotProtobuf(f"field {field.number} is not length-delimited")
    return field.value


def _message(fields: list[_Field], number: int) -> list[_Field]:
    """The fields of sub-message `number` (empty when absent)."""
    return next((_fields(_payload(f)) for f in fields if f.number == number), [])


def _int32(field: _Field) -> int:
    if not isinstance(field.value, int):
        raise _NotProtobuf(f"field {field.number} is not a varint")
    return struct.unpack("<i", struct.pack("<I", field.value & 0xFFFFFFFF))[0]


@dataclass(frozen=True)
class SentencePieceModel:
    """A parsed model file: its pieces (the vocabulary, by id), where each piece's entry lies in
    `data`, and the other top-level fields (the specs) in file order."""

    data: bytes
    pieces: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]
    rest: tuple[_Field, ...]


def _scan(data: bytes) -> SentencePieceModel:
    """Split a model file into pieces and other fields. A plain loop over offsets: a file holds
    tens of thousands of pieces, and per-piece objects would cost more than the rest of a build."""
    texts: list[bytes] = []
    spans: list[tuple[int, int]] = []
    rest: list[_Field] = []
    i, end = 0, len(data)
    while i < end:
        # The usual piece: field 1 holding a short message whose first field is a short piece.
        if data[i] == 0x0A and i + 3 < end and data[i + 1] < 0x80 and data[i + 2] == 0x0A:
            stop = i + 2 + data[i + 1]
            if data[i + 3] < 0x80 and i + 4 + data[i + 3] <= stop:
                texts.append(data[i + 4 : i + 4 + data[i + 3]])
                spans.append((i, stop))
                i = stop
                continue
        field, stop = _field(data, i)
        if field.number == _PIECES:
            payload = _payload(field)
            texts.append(next((_payload(f) for f in _fields(payload) if f.number == _PIECE), b""))
            spans.append((i, stop))
        else:
            rest.append(field)
        i = stop
    if i != end:
        raise _NotProtobuf("truncated field")
    pieces = tuple(t.decode() for t in texts)
    return SentencePieceModel(data, pieces, tuple(spans), tuple(rest))


def read_sentencepiece(path: Path) -> SentencePieceModel | None:
    """The parsed model, or None when `path` is not a SentencePiece protobuf (a tiktoken text
    file, say). A build parses its source model once and passes it on (shrink_sentencepiece's
    `model`)."""
    try:
        model = _scan(Path(path).read_bytes())
        for number in (_TRAINER, _NORMALIZER):  # the specs a shrink edits must parse too
            _message(list(model.rest), number)
    except (OSError, _NotProtobuf, UnicodeDecodeError):  # a folder, a tiktoken text file
        return None
    return model if model.pieces else None


def shrink_sentencepiece(
    src: Path, dest: Path, new_vocab: list[str], *, model: SentencePieceModel | None = None
) -> bool:
    """Write `dest` keeping the pieces of `new_vocab` (the tiny model vocab, by new id); `model`
    is `src` already parsed.

    Tokens that are not SentencePiece pieces (T5's `<extra_id_*>`, added on top by the wrapper)
    must come after every piece, as in the source; otherwise ids would disagree and nothing is
    written (returns False).
    """
    model = model or read_sentencepiece(src)
    if model is None:
        return False
    by_piece = {piece: span for piece, span in zip(model.pieces, model.spans, strict=True)}
    n = 0
    while n < len(new_vocab) and new_vocab[n] in by_piece:
        n += 1
    if any(tok in by_piece for tok in new_vocab[n:]):
        return False
    try:
        rest = _edited_specs(model, new_vocab[:n])
    except _NotProtobuf:  # a special id that is not a varint: no model sentencepiece loads
        return False
    kept = [model.data[a:b] for a, b in (by_piece[tok] for tok in new_vocab[:n])]
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(b"".join([*kept, *(f.raw for f in rest)]))
    return True


def _edited_specs(model: SentencePieceModel, kept: list[str]) -> list[_Field]:
    """The top-level fields other than pieces, for the `kept` pieces: the trainer spec's special
    ids point at their pieces' new ids (-1 when dropped), its vocab size counts them, and the
    normalizer does nothing."""
    new_ids = {tok: i for i, tok in enumerate(kept)}
    rest = list(model.rest)
    trainer = _message(rest, _TRAINER)
    for number, default in _SPECIAL_ID_DEFAULTS.items():
        old = next((_int32(f) for f in trainer if f.number == number), default)
        if 0 <= old < len(model.pieces):  # the id names a piece: point it at that piece's new id
            trainer = _with(trainer, number, new_ids.get(model.pieces[old], -1))
    trainer = _with(trainer, _VOCAB_SIZE, len(kept))
    # The nmt_nfkc charsmap alone is 237 KB for T5: the tiny model normalises nothing.
    normalizer = _with(_message(rest, _NORMALIZER), _NAME, b"identity")
    normalizer = _with(normalizer, _CHARSMAP, b"")
    rest = _with(rest, _TRAINER, b"".join(f.raw for f in trainer))
    return _with(rest, _NORMALIZER, b"".join(f.raw for f in normalizer))
