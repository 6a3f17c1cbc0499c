"""Validate a (tiny) tokenizer folder: ids in range, lossless round trip, chat template, model fit.

`check_tokenizer` never raises on a failed check: it returns a report whose `problems` list
says what is wrong, and `ok` is True only when that list is empty. Callers decide how to fail.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

from tinykit.errors import UsageError
from tinykit.tokenizer import edit as tjson
from tinykit.tokenizer import files as files_fmt
from tinykit.tokenizer import sp_model

ASCII_PROBE = "Hello, World! The quick brown fox jumps over 13 lazy dogs in 2024: x = y + 7.5;"
PROBE = ASCII_PROBE + " Café naïve résumé Ærøskøbing. Emoji 😀🚀 and CJK 中文分词测试 日本語."
CONVERSATION = [
    {"role": "user", "content": "Hello! What is 2 + 2?"},
    {"role": "assistant", "content": "2 + 2 = 4. Anything else?"},
    {"role": "user", "content": "No, thank you."},
    {"role": "assistant", "content": "You are welcome."},
]
LOSSLESS_KINDS = (tjson.BYTE_LEVEL_BPE, tjson.BYTE_FALLBACK_BPE, tjson.BYTE_FALLBACK_UNIGRAM)


def expected_round_trip(tj: dict, text: str) -> str:
    """The text a lossless tokenizer gives back: its normalizer may lowercase or NFKC-fold."""
    norm = json.dumps(tj.get("normalizer"))
    if '"NFKC"' in norm:
        text = unicodedata.normalize("NFKC", text)
    if '"NFC"' in norm:
        text = unicodedata.normalize("NFC", text)
    if '"Lowercase"' in norm or '"lowercase": true' in norm:
        text = text.lower()
    return text


def check_tokenizer(
    folder: Path,
    model_dir: Path | None = None,
    *,
    trust_remote_code: bool = False,
    loaded: Any = None,
) -> dict:
    """Check the tokenizer in `folder` (and, with `model_dir`, a forward pass of that model).

    ``trust_remote_code``: the folder is a model's with its own code (``auto_map``), which the
    caller was allowed to run; transformers reads that config to pick the tokenizer class.
    ``loaded``: the folder's tokenizer as the caller already loaded it (not loaded again)."""
    from transformers import AutoTokenizer

    from tinykit.tokenizer.source import has_tokenizer_files

    folder = Path(folder)
    if not has_tokenizer_files(folder):
        raise UsageError(
            f"{folder} has no tokenizer files to check. "
            "check_tokenizer needs tokenizer.json, vocab files or a tokenizer .model. "
            "Build one first: tinykit make-tiny-tokenizer SOURCE -o DIR."
        )
    problems: list[str] = []
    tok = (
        loaded
        if loaded is not None
        else AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    )
    tj = json.loads(tok.backend_tokenizer.to_str())
    size = len(tok)
    kind = tjson.tokenizer_kind(tj)
    max_id = max(tok.get_vocab().values())
    if max_id >= size:
        problems.append(f"vocab id {max_id} >= len(tokenizer) {size}")
    for special in tok.all_special_tokens:
        idx = tok.convert_tokens_to_ids(special)
        if not isinstance(idx, int) or idx >= size or tok.convert_ids_to_tokens(idx) != special:
            problems.append(f"special token {special!r} does not round-trip (id {idx})")

    ids = encode(tok, PROBE, add_special_tokens=True, verbose=False)["input_ids"]
    plain = encode(tok, PROBE, add_special_tokens=False, verbose=False)["input_ids"]
    if any(i >= size for i in ids):
        problems.append(f"probe encodes to id {max(ids)} >= {size}")
    from tokenizers import Tokenizer

    if (folder / "tokenizer.json").is_file():
        backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
        backend.no_padding()
        backend.no_truncation()
        words = reads_words(tok)  # a layout tokenizer encodes pre-split words with their boxes
        text: Any = PROBE.split() if words else PROBE
        if backend.encode(text, is_pretokenized=words, add_special_tokens=False).ids != plain:
            problems.append(f"{type(tok).__name__} and tokenizer.json encode the probe differently")
    lossless = None
    # CLIP-style BPEs pre-split bytes but mark word ends with a suffix: not lossless by design
    if kind in LOSSLESS_KINDS and not tj["model"].get("end_of_word_suffix"):
        decoded = tok.decode(plain, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        lossless = decoded == expected_round_trip(tj, PROBE)
        if not lossless:
            problems.append(f"decode(encode(probe)) is not lossless: {decoded!r}")
    unk_id = tok.unk_token_id
    unk_rate = sum(i == unk_id for i in plain) / max(1, len(plain)) if unk_id is not None else 0.0
    ascii_ids = encode(tok, ASCII_PROBE, add_special_tokens=False)["input_ids"]
    if unk_id is not None and unk_id in ascii_ids:
        problems.append("plain ASCII text encodes to the unknown token")

    report: dict[str, Any] = {
        "folder": str(folder),
        "class": type(tok).__name__,
        "kind": kind,
        "vocab_size": size,
        "probe_tokens": len(plain),
        "lossless": lossless,
        "unk_rate": round(unk_rate, 4),
        "chat_template": _check_chat_template(tok, size, problems),
        "slow_files": _check_slow_files(folder, tok, problems),
        "forward": _check_forward(model_dir, ids, size, problems) if model_dir else None,
        "files": {
            p.relative_to(folder).as_posix(): p.stat().st_size
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        },
    }
    report["size_bytes"] = sum(report["files"].values())
    report["problems"] = problems
    report["ok"] = not problems
    return report


def reads_words(tok: Any) -> bool:
    """Whether the tokenizer encodes pre-split words with a box each (LayoutLMv3's, LiLT's)."""
    import inspect

    return "boxes" in inspect.signature(tok.__call__).parameters


def encode(tok: Any, text: str, **kwargs: Any) -> Any:
    """`tok(text)`, or for a layout tokenizer its words with a zero box each."""
    if reads_words(tok):
        words = text.split()
        return tok(words, boxes=[[0, 0, 0, 0]] * len(words), **kwargs)
    return tok(text, **kwargs)


def _check_chat_template(tok, size: int, problems: list[str]) -> dict | None:
    if not getattr(tok, "chat_template", None):
        return None
    try:
        text = tok.apply_chat_template(CONVERSATION, tokenize=False)
    except Exception as e:  # a template may reject a conversation; that is a finding, not a crash
        problems.append(f"chat template does not render a two-turn conversation: {e}")
        return {"rendered": False}
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if any(i >= size for i in ids):
        problems.append(f"chat template encodes to id {max(ids)} >= {size}")
    # Each special token written by the template must stay one id, not be spelled out.
    split = [
        t for t in tok.added_tokens_encoder if t in text and tok.added_tokens_encoder[t] not in ids
    ]
    if split:
        problems.append(f"chat template tokens {split} are not encoded as single ids")
    return {"rendered": True, "chars": len(text), "tokens": len(ids)}


def _check_slow_files(folder: Path, tok, problems: list[str]) -> dict:
    """The SentencePiece/tiktoken files must agree with tokenizer.json piece by piece."""
    found = {}
    for name in sp_model.SENTENCEPIECE_NAMES:
        model = sp_model.read_sentencepiece(folder / name)
        if model is None:
            continue
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=str(folder / name))
        pieces = model.pieces
        mismatch = [i for i, p in enumerate(pieces) if tok.convert_ids_to_tokens(i) != p]
        if mismatch:
            problems.append(f"{name}: piece {mismatch[0]} differs from tokenizer.json")
        same = sp.encode(ASCII_PROBE) == tok(ASCII_PROBE, add_special_tokens=False)["input_ids"]
        if not same:
            problems.append(
                f"{name}: sentencepiece and tokenizer.json encode ASCII text differently"
            )
        found[name] = {"pieces": len(pieces), "same_ids": same}
    for name in files_fmt.TIKTOKEN_NAMES:
        ranks = files_fmt.read_tiktoken(folder / name) if (folder / name).is_file() else None
        if not ranks:
            continue
        from transformers.convert_slow_tokenizer import bytes_to_unicode

        enc = bytes_to_unicode()
        bad = [
            r
            for b, r in ranks.items()
            if tok.convert_ids_to_tokens(r) != "".join(enc[x] for x in b)
        ]
        if bad:
            problems.append(f"{name}: rank {min(bad)} differs from tokenizer.json")
        found[name] = {"ranks": len(ranks)}
    return found


def _check_forward(model_dir: Path, ids: list[int], size: int, problems: list[str]) -> dict:
    import torch
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(model_dir)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    model_vocab = getattr(text_config, "vocab_size", None)
    if model_vocab is not None and model_vocab < size:
        problems.append(f"model vocab_size {model_vocab} < len(tokenizer) {size}")
        return {"ran": False, "model_vocab_size": model_vocab}
    model = AutoModel.from_pretrained(model_dir).eval()
    batch = torch.tensor([ids[:64]])
    kwargs = {"decoder_input_ids": batch} if config.is_encoder_decoder else {}
    try:
        with torch.no_grad():
            out = model(input_ids=batch, **kwargs)
    except Exception as e:  # report, don't crash: the caller renders the problem list
        problems.append(f"forward pass of {type(model).__name__} on the probe failed: {e}")
        return {"ran": False, "model_vocab_size": model_vocab}
    hidden = out[0]
    if not torch.isfinite(hidden).all():
        problems.append("forward pass produced non-finite values")
    return {"ran": True, "model_vocab_size": model_vocab, "output_shape": list(hidden.shape)}
