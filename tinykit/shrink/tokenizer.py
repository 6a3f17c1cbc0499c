"""Tiny tokenizers that keep the source's special tokens, post-processor and chat template.

`shrink_tokenizer` reads the source's files (tokenizer.json; vocab.json + merges.txt; vocab.txt;
a SentencePiece `.model`; a Llama-3 tiktoken `original/tokenizer.model`), shrinks the
tokenizers JSON by structured editing (tinykit.shrink.tokenizer_json), mirrors the shrink into
the SentencePiece/tiktoken files it came with, and validates the result. When there is nothing
to edit (a repo with only tokenizer_config.json, or a bare model_type) it trains a small
tokenizer of the right class instead.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tinykit.errors import TinyArtifactInvalid, UnsupportedModelError, UsageError
from tinykit.shrink import tokenizer_files as files_fmt
from tinykit.shrink import tokenizer_json as tjson
from tinykit.shrink import tokenizer_train as train

# tokenizer_config.json keys that would be stale or wrong in the tiny copy.
_STALE_CONFIG_KEYS = {
    "added_tokens_decoder", "auto_map", "name_or_path", "special_tokens_map_file",
    "tokenizer_file", "vocab_file", "merges_file", "vocab_size",
}
_COPIED = ("chat_template.jinja", "chat_template.json", "special_tokens_map.json")


@dataclass(frozen=True)
class TinyTokenizer:
    """What shrink_tokenizer wrote: sizes, the kept special ids' old -> new map, file names."""

    vocab_size: int
    id_map: dict[int, int]
    files: tuple[str, ...]
    kind: str
    method: str = "edit"  # edit | retrain | scratch
    dropped: tuple[str, ...] = field(default=())  # added tokens of the source not kept


@dataclass
class _Source:
    folder: Path | None
    tj: dict
    config: dict
    tokenizer_class: str
    method: str = "edit"
    sentencepiece: str | None = None  # relative file name to mirror
    tiktoken: str | None = None
    old_ids: dict[str, int] = field(default_factory=dict)  # content -> source id, for id_map


def has_tokenizer_files(folder: Path) -> bool:
    """True when `folder` holds a vocabulary (tokenizer_config.json alone does not count)."""
    folder = Path(folder)
    if (folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file():
        return True
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        return True
    return any((folder / n).is_file() for n in (*files_fmt.SENTENCEPIECE_NAMES, *files_fmt.TIKTOKEN_NAMES))


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text("utf-8")) if path.is_file() else {}


def _token_text(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _named_special_tokens(config: dict) -> set[str]:
    """Special tokens a tokenizer_config.json / special_tokens_map.json names."""
    named: set[str] = set()
    for key, value in config.items():
        if key.endswith("_token"):
            named.add(_token_text(value))
        elif key in ("additional_special_tokens", "extra_special_tokens"):
            values = value.values() if isinstance(value, dict) else value or []
            named.update(_token_text(v) for v in values)
    named.discard(None)
    return named


def chat_templates(folder: Path | None, config: dict) -> str:
    """All chat-template text of the source, concatenated (to find the tokens it uses)."""
    texts = []
    tpl = config.get("chat_template")
    if isinstance(tpl, list):
        texts += [t.get("template", "") for t in tpl]
    elif isinstance(tpl, str):
        texts.append(tpl)
    if folder is not None:
        if (folder / "chat_template.jinja").is_file():
            texts.append((folder / "chat_template.jinja").read_text("utf-8"))
        texts.append(str(_read_json(folder / "chat_template.json").get("chat_template", "")))
    return "\n".join(texts)


def _config_token_ids(folder: Path | None) -> set[int]:
    """Ids that config.json / generation_config.json name (bos/eos/pad/image/... token ids)."""
    found: set[int] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key.endswith(("_token_id", "_token_ids", "_token_index")):
                    values = value if isinstance(value, list) else [value]
                    found.update(v for v in values if isinstance(v, int))
                else:
                    walk(value)

    if folder is not None:
        for name in ("config.json", "generation_config.json"):
            walk(_read_json(folder / name))
    return found


def _config_special_ids(folder: Path, config: dict) -> dict[str, int]:
    """token -> source id for the specials config.json names by id (bos_token_id -> bos_token)."""
    ids: dict[str, int] = {}

    def walk(node: dict) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value)  # text_config of multimodal models
            elif key.endswith("_token_id") and isinstance(value, int):
                token = _token_text(config.get(key.removesuffix("_id")))
                if token:
                    ids.setdefault(token, value)

    for name in ("config.json", "generation_config.json"):
        walk(_read_json(folder / name))
    return ids


def _config_added_tokens(folder: Path | None, config: dict) -> list[dict]:
    """Added tokens declared outside tokenizer.json (added_tokens_decoder, added_tokens.json)."""
    entries = [{**v, "id": int(k)} for k, v in config.get("added_tokens_decoder", {}).items()]
    if folder is not None:
        known = {e["content"] for e in entries}
        for content, idx in _read_json(folder / "added_tokens.json").items():
            if content not in known:
                entries.append({"content": content, "id": idx, "special": True})
    return sorted(entries, key=lambda e: e["id"])


def _merge_added(tj: dict, entries: list[dict]) -> dict:
    """Add config-declared tokens missing from tokenizer.json, at their declared ids when free."""
    vocab = tjson.model_vocab(tj)
    taken = {a["id"] for a in tj.get("added_tokens", [])} | set(range(len(vocab)))
    have = {a["content"] for a in tj.get("added_tokens", [])}
    for e in entries:
        if e["content"] in have or e["content"] in vocab[:0]:
            continue
        if e["content"] in set(vocab):
            idx = vocab.index(e["content"])
            tj.setdefault("added_tokens", []).append({**_added_entry(e), "id": idx})
        elif e["id"] not in taken:
            tj.setdefault("added_tokens", []).append({**_added_entry(e), "id": e["id"]})
            taken.add(e["id"])
        have.add(e["content"])
    return tj


def _added_entry(e: dict) -> dict:
    return {
        "content": e["content"],
        "single_word": e.get("single_word", False),
        "lstrip": e.get("lstrip", False),
        "rstrip": e.get("rstrip", False),
        "normalized": e.get("normalized", False),
        "special": e.get("special", True),
    }


def _class_name(folder: Path | None, config: dict, fallback: str) -> str:
    if config.get("tokenizer_class"):
        return config["tokenizer_class"]
    model_type = _read_json(folder / "config.json").get("model_type") if folder else None
    if model_type:
        try:
            return train.class_for_model_type(model_type)
        except UnsupportedModelError:
            pass
    return fallback


def _load_with_transformers(folder: Path, config: dict, fallback: str):
    """Load vocab.json+merges.txt / vocab.txt / SentencePiece sources (transformers converts them)."""
    cls = train.tokenizer_class(_class_name(folder, config, fallback))
    tok = cls.from_pretrained(folder)
    if len(tok) <= len(tok.all_special_tokens) + 3:
        # transformers 5 silently builds an empty tokenizer when it finds no usable file
        raise UsageError(
            f"{folder}: {cls.__name__} loaded only {len(tok)} tokens from the vocab files. "
            "The files are not in the layout this class reads. "
            "Add a tokenizer.json, or a tokenizer_config.json naming the right tokenizer_class."
        )
    return tok


def _read_source(src: Path | None, vocab: int, model_type: str | None, method: str) -> _Source:
    if src is None:
        if not model_type:
            raise UsageError(
                "shrink_tokenizer got neither a source folder nor a model_type. "
                "Without either there is nothing to shrink or train. "
                "Pass src=<folder with tokenizer files> or model_type='llama'."
            )
        name = train.class_for_model_type(model_type)
        return _Source(None, train.train_json(name, vocab), {}, name, method="scratch")
    src = Path(src)
    if not src.is_dir():
        raise UsageError(
            f"tokenizer source {src} is not a folder. "
            "shrink_tokenizer reads a folder laid out as on the Hub. "
            "Pass the folder that holds tokenizer.json / vocab files."
        )
    config = {**_read_json(src / "special_tokens_map.json"), **_read_json(src / "tokenizer_config.json")}
    if "auto_map" in config:
        raise UnsupportedModelError(
            f"{src}: the tokenizer needs remote code ({config['auto_map']}). "
            "tinykit never runs a repo's own Python code. "
            "Use a model whose tokenizer is built into transformers."
        )
    declared = _config_added_tokens(src, config)
    old_ids = {**_config_special_ids(src, config), **{e["content"]: e["id"] for e in declared}}
    from tokenizers import Tokenizer

    sp = next((n for n in files_fmt.SENTENCEPIECE_NAMES if files_fmt.read_sentencepiece(src / n)), None)
    if method == "retrain" and has_tokenizer_files(src):
        tok = _load_with_transformers_or_json(src, config)
        tj = train.retrain_json(tok, vocab)
        return _Source(src, tj, config, _class_name(src, config, type(tok).__name__), "retrain", old_ids={
            **old_ids, **{a.content: i for i, a in tok.added_tokens_decoder.items()}})
    if (src / "tokenizer.json").is_file():
        tj = json.loads(Tokenizer.from_file(str(src / "tokenizer.json")).to_str())
        cls = _class_name(src, config, "PreTrainedTokenizerFast")
        return _Source(src, _merge_added(tj, declared), config, cls, sentencepiece=sp, old_ids=old_ids)
    if sp or (src / "vocab.txt").is_file() or (src / "merges.txt").is_file():
        fallback = "T5Tokenizer" if sp == "spiece.model" else (
            "LlamaTokenizer" if sp else "BertTokenizer" if (src / "vocab.txt").is_file() else "GPT2Tokenizer")
        tok = _load_with_transformers(src, config, fallback)
        tj = json.loads(tok._tokenizer.to_str())
        old_ids.update({a.content: i for i, a in tok.added_tokens_decoder.items()})
        return _Source(src, tj, config, _class_name(src, config, type(tok).__name__), sentencepiece=sp, old_ids=old_ids)
    for name in files_fmt.TIKTOKEN_NAMES:
        ranks = files_fmt.read_tiktoken(src / name) if (src / name).is_file() else None
        if ranks:
            tj = files_fmt.tiktoken_to_json(ranks, vocab)
            tj = _merge_added(tj, [e for e in declared if e["id"] >= len(ranks)])
            cls = _class_name(src, config, "PreTrainedTokenizerFast")
            return _Source(src, tj, config, cls, tiktoken=name, old_ids=old_ids)
    if config:
        # The repo ships only tokenizer_config.json (the vocab is LFS-only or elsewhere):
        # train a tokenizer of the declared class and keep its special tokens and chat template.
        cls = _class_name(src, config, "")
        if not cls:
            raise UsageError(
                f"{src}/tokenizer_config.json names no tokenizer_class and there is no config.json "
                "model_type, so the tokenizer class is unknown. "
                "Add tokenizer_class to tokenizer_config.json, or pass model_type=..."
            )
        essential = _essential(src, config, declared, {})
        entries = [e for e in declared if e["content"] in essential]
        entries += [{"content": t, "special": True} for t in sorted(essential - {e["content"] for e in entries})]
        tj = train.train_json(cls, vocab - len(entries))
        return _Source(src, train.append_added_tokens(tj, entries), config, cls, "scratch", old_ids=old_ids)
    raise UsageError(
        f"{src} has no tokenizer files. Expected tokenizer.json, vocab.json + merges.txt, "
        "vocab.txt, a SentencePiece .model, or tokenizer_config.json with tokenizer_class. "
        "Pass the folder of a Hub repo that includes its tokenizer."
    )


def _load_with_transformers_or_json(src: Path, config: dict):
    if (src / "tokenizer.json").is_file():
        cls = train.tokenizer_class(_class_name(src, config, "PreTrainedTokenizerFast"))
        return cls.from_pretrained(src)
    return _load_with_transformers(src, config, "GPT2Tokenizer")


def _essential(folder: Path | None, config: dict, added: list[dict], by_id: dict[int, str]) -> set[str]:
    """Added tokens that must survive: named specials, chat-template tokens, config-referenced ids."""
    essential = _named_special_tokens(config)
    template = chat_templates(folder, config)
    essential |= {a["content"] for a in added if a["content"] in template}
    essential |= {by_id[i] for i in _config_token_ids(folder) if i in by_id}
    # T5-style sentinels: the tokenizer class re-creates all `extra_ids` of them on load anyway
    essential |= {a["content"] for a in added if a["content"].startswith("<extra_id_")}
    return essential


def shrink_tokenizer(src: Path | None, out: Path, *, vocab: int, model_type: str | None = None,
                     method: str = "auto") -> TinyTokenizer:
    """Write a tiny tokenizer (≤ `vocab` ids) for `src` (or a bare `model_type`) into `out`.

    `method` is auto (edit the JSON; train when there is nothing to edit) or retrain.
    Raises TinyArtifactInvalid if the result fails check_tokenizer.
    """
    if vocab < 16:
        raise UsageError(f"--vocab {vocab} is too small. A tokenizer needs room for its special "
                         "and byte tokens. Pass --vocab 512 or more.")
    if method not in ("auto", "retrain"):
        raise UsageError(f"method {method!r} is unknown. Expected 'auto' or 'retrain'. "
                         "Pass method='auto' unless editing fails.")
    source = _read_source(src, vocab, model_type, method)
    tj, dropped = source.tj, ()
    old_to_new: dict[int, int] = {}
    if source.method == "edit":
        try:
            tjson.tokenizer_kind(tj)
        except UnsupportedModelError:
            tok = _load_with_transformers_or_json(Path(src), source.config)
            source.tj, source.method = train.retrain_json(tok, vocab), "retrain"
    if source.method == "edit":
        vocab_before = tjson.model_vocab(tj)
        by_id = {i: vocab_before[i] for i in _config_token_ids(source.folder) if i < len(vocab_before)}
        by_id.update({a["id"]: a["content"] for a in tj.get("added_tokens", [])})
        essential = _essential(source.folder, source.config, tj.get("added_tokens", []), by_id)
        # config-referenced ids that are plain vocab tokens are kept as they are
        tj, old_to_new, dropped = tjson.shrink_json(tj, vocab, essential)
    else:
        tj = tjson.drop_precompiled_normalizer(source.tj)
        if tjson.vocab_size(tj) > vocab:
            # trainers do not count added tokens or a forced alphabet: trim like any source
            every_added = {a["content"] for a in tj.get("added_tokens", [])}
            tj, _, dropped = tjson.shrink_json(tj, vocab, every_added)
    out = Path(out)
    written = _write(out, source, tj)
    new_ids = {a["content"]: a["id"] for a in tj.get("added_tokens", [])}
    if source.method == "edit":
        wanted = {a["id"] for a in source.tj.get("added_tokens", [])} | _config_token_ids(source.folder)
        id_map = {old: new for old, new in old_to_new.items() if old in wanted}
    else:
        id_map = {old: new_ids[c] for c, old in source.old_ids.items() if c in new_ids}
    report = _check(out)
    result = TinyTokenizer(
        vocab_size=report["vocab_size"], id_map=dict(sorted(id_map.items())), files=written,
        kind=report["kind"], method=source.method, dropped=tuple(dropped),
    )
    if report["vocab_size"] > vocab:
        raise TinyArtifactInvalid(
            f"tiny tokenizer in {out} has {report['vocab_size']} ids, more than --vocab {vocab}. "
            "This is a tinykit bug. Report it with the source folder.", report=report)
    return result


def _check(out: Path) -> dict:
    from tinykit.shrink.tokenizer_check import check_tokenizer

    report = check_tokenizer(out)
    if not report["ok"]:
        raise TinyArtifactInvalid(
            f"tiny tokenizer in {out} failed validation: {'; '.join(report['problems'])}. "
            "The shrink broke an invariant. Retry with method='retrain', and report the source.",
            report=report,
        )
    return report


def _write(out: Path, source: _Source, tj: dict) -> tuple[str, ...]:
    from tokenizers import Tokenizer

    out.mkdir(parents=True, exist_ok=True)
    # Round-trip through tokenizers: it validates the document and writes its canonical form
    # (compact: indentation alone would double the file).
    Tokenizer.from_str(json.dumps(tj)).save(str(out / "tokenizer.json"), pretty=False)
    config = {k: v for k, v in source.config.items() if k not in _STALE_CONFIG_KEYS}
    config["tokenizer_class"] = source.tokenizer_class
    config["added_tokens_decoder"] = {
        str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
        for a in sorted(tj.get("added_tokens", []), key=lambda a: a["id"])
    }
    (out / "tokenizer_config.json").write_text(
        json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n", "utf-8")
    if source.folder is not None:
        for name in _COPIED:
            if (source.folder / name).is_file():
                shutil.copyfile(source.folder / name, out / name)
    vocab = tjson.model_vocab(tj)
    if source.method == "edit" and source.sentencepiece:
        files_fmt.shrink_sentencepiece(source.folder / source.sentencepiece, out / source.sentencepiece, vocab)
    if source.method == "edit" and source.tiktoken:
        files_fmt.write_tiktoken(out / source.tiktoken, vocab)
    return tuple(sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()))


def make_tiny_tokenizer(source, vocab: int = 1024, out=None, *, force: bool = False,
                        method: str = "auto") -> Path:
    """Shrink the tokenizer in folder `source` to ≤ `vocab` ids; write it to `out` atomically.

    `out` defaults to ./tiny-<name>-tokenizer. Returns the output folder.
    """
    src = Path(source)
    if not src.is_dir():
        raise UsageError(
            f"tokenizer source {source!r} is not a local folder. "
            "make_tiny_tokenizer reads a folder laid out as on the Hub (Hub ids are not supported yet). "
            "Download the repo (huggingface-cli download ORG/NAME --local-dir DIR) and pass DIR."
        )
    out = Path(out) if out is not None else Path.cwd() / f"tiny-{src.resolve().name}-tokenizer"
    if out.exists() and not force:
        raise UsageError(f"output folder {out} already exists. tinykit does not overwrite it. "
                         "Pass --force (force=True) or another -o/out.")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        result = shrink_tokenizer(src, staging, vocab=vocab, method=method)
        (staging / "tinykit-tokenizer.json").write_text(json.dumps(
            {"source": src.name, "vocab": vocab, "vocab_size": result.vocab_size, "kind": result.kind,
             "method": result.method, "id_map": {str(k): v for k, v in result.id_map.items()},
             "dropped_added_tokens": list(result.dropped)}, indent=2, sort_keys=True) + "\n", "utf-8")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return out
