"""SentencePiece .model files read and shrunk at the wire level (tinykit.tokenizer.sp_model),
against the real protobuf runtime and the real sentencepiece library on the Hub's model files."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizer_sources import hub

from tinykit.tokenizer.sp_model import read_sentencepiece, shrink_sentencepiece

MODELS = [
    "google-t5/t5-base/spiece.model",
    "meta-llama/Llama-2-7b-hf/tokenizer.model",
    "mistralai/Mistral-7B-Instruct-v0.3/tokenizer.model",
]

# What shrink_sentencepiece did with the protobuf runtime before it read the wire itself: the
# reference its output must equal byte for byte. Run apart: the pure-Python runtime must be
# chosen before protobuf is imported.
REFERENCE = """
import json, sys
from pathlib import Path
from sentencepiece import sentencepiece_model_pb2

src, cases = sys.argv[1], json.loads(sys.stdin.read())
out = []
for vocab in cases:
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(Path(src).read_bytes())
    by_piece = {p.piece: p for p in proto.pieces}
    n = 0
    while n < len(vocab) and vocab[n] in by_piece:
        n += 1
    if any(t in by_piece for t in vocab[n:]):
        out.append(None)
        continue
    special = {}
    for field in ("unk_id", "bos_id", "eos_id", "pad_id"):
        old = getattr(proto.trainer_spec, field)
        if 0 <= old < len(proto.pieces):
            special[field] = proto.pieces[old].piece
    kept = [by_piece[t] for t in vocab[:n]]
    del proto.pieces[:]
    proto.pieces.extend(kept)
    ids = {p.piece: i for i, p in enumerate(proto.pieces)}
    for field, piece in special.items():
        setattr(proto.trainer_spec, field, ids.get(piece, -1))
    proto.trainer_spec.vocab_size = len(kept)
    proto.normalizer_spec.name = "identity"
    proto.normalizer_spec.precompiled_charsmap = b""
    out.append(proto.SerializeToString().hex())
print(json.dumps(out))
"""


def _reference(src, cases: list[list[str]]) -> list[bytes | None]:
    env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
    proc = subprocess.run(
        [sys.executable, "-c", REFERENCE, str(src)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return [None if h is None else bytes.fromhex(h) for h in json.loads(proc.stdout)]


@pytest.mark.parametrize("name", MODELS)
def test_pieces_are_the_ones_sentencepiece_reads(name):
    import sentencepiece

    path = hub(name.rsplit("/", 1)[0]) / name.rsplit("/", 1)[1]
    sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
    model = read_sentencepiece(path)
    assert model is not None
    assert list(model.pieces) == [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


@pytest.mark.parametrize("name", MODELS)
def test_shrunk_file_is_what_the_protobuf_runtime_writes(name, tmp_path):
    path = hub(name.rsplit("/", 1)[0]) / name.rsplit("/", 1)[1]
    model = read_sentencepiece(path)
    assert model is not None
    pieces = list(model.pieces)
    rnd = random.Random(name)
    cases = [
        pieces[:1024],
        pieces[3:500] + ["<extra_id_0>"],  # unk/bos/eos dropped (ids -1); a token added after
        pieces[:100] + ["<not a piece>", pieces[150]],  # a piece after a non-piece: refused
        [pieces[i] for i in sorted(rnd.sample(range(len(pieces)), 700))],
    ]
    expected = _reference(path, cases)
    assert expected[2] is None and expected[0] is not None
    for i, (vocab, want) in enumerate(zip(cases, expected, strict=True)):
        dest = tmp_path / f"{i}.model"
        assert shrink_sentencepiece(path, dest, vocab) is (want is not None)
        if want is not None:
            assert dest.read_bytes() == want
            shrunk = read_sentencepiece(dest)
            assert shrunk is not None and list(shrunk.pieces) == vocab[: len(shrunk.pieces)]


def test_files_that_are_not_sentencepiece_models_read_as_none(tmp_path):
    tiktoken = tmp_path / "tokenizer.model"
    tiktoken.write_text("".join(f"{chr(65 + i % 26)}Q== {i}\n" for i in range(600)))
    empty = tmp_path / "empty.model"
    empty.write_bytes(b"")
    broken_spec = tmp_path / "broken.model"  # piece "a", then a trainer spec cut mid-varint
    broken_spec.write_bytes(b"\x0a\x03\x0a\x01a" + b"\x12\x01\xff")
    for path in (tiktoken, empty, broken_spec, tmp_path, tmp_path / "missing.model"):
        assert read_sentencepiece(path) is None
        assert shrink_sentencepiece(path, tmp_path / "out.model", ["a"]) is False
    assert not (tmp_path / "out.model").exists()


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300))
def test_any_bytes_read_as_a_model_or_none_never_an_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / "x.model"
    path.write_bytes(data)
    model = read_sentencepiece(path)
    assert model is None or all(isinstance(p, str) for p in model.pieces)
