"""Read a tokenizer source folder into one tokenizers JSON document plus what must survive.

Every layout becomes a tokenizer.json document: tokenizer.json as is; vocab.json + merges.txt,
vocab.txt and SentencePiece `.model` files converted by transformers; a tiktoken rank file by
tinykit.tokenizer.files; and a repo with only tokenizer_config.json by training a small
tokenizer of the declared class. The special tokens to keep are gathered from tokenizer_config,
special_tokens_map, the chat template, and config.json's token ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from tinykit.errors import UnsupportedModelError, UsageError
from tinykit.tokenizer import edit as tjson
from tinykit.tokenizer import files as files_fmt
from tinykit.tokenizer import train as train


@dataclass
class Source:
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
    return any(
        (folder / n).is_file() for n in (*files_fmt.SENTENCEPIECE_NAMES, *files_fmt.TIKTOKEN_NAMES)
    )


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text("utf-8")) if path.is_file() else {}


def _token_text(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _named_special_tokens(config: dict) -> set[str]:
    """Special tokens a tokenizer_config.json / special_tokens_map.json names."""
    named: set[str | None] = set()
    for key, value in config.items():
        if key.endswith("_token"):
            named.add(_token_text(value))
        elif key in ("additional_special_tokens", "extra_special_tokens"):
            values = value.values() if isinstance(value, dict) else value or []
            named.update(_token_text(v) for v in values)
    return {t for t in named if t is not None}


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


def config_token_ids(folder: Path | None) -> set[int]:
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
    vocab = {tok: i for i, tok in enumerate(tjson.model_vocab(tj))}
    taken = {a["id"] for a in tj.get("added_tokens", [])} | set(vocab.values())
    have = {a["content"] for a in tj.get("added_tokens", [])}
    for e in entries:
        if e["content"] in have:
            continue
        if e["content"] in vocab:  # a plain vocab token the config marks as special
            tj.setdefault("added_tokens", []).append(
                {**train.added_entry(e), "id": vocab[e["content"]]}
            )
        elif e["id"] not in taken:
            tj.setdefault("added_tokens", []).append({**train.added_entry(e), "id": e["id"]})
            taken.add(e["id"])
        have.add(e["content"])
    return tj


def _is_tiktoken(path: Path) -> bool:
    return path.is_file() and files_fmt.read_tiktoken(path) is not None


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
    """Load vocab.json+merges.txt, vocab.txt or SentencePiece sources (transformers converts)."""
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


@dataclass
class _Folder:
    """What every layout reader needs: the folder, its tokenizer config, the ids to keep."""

    path: Path
    config: dict
    declared: list[dict]  # added tokens declared outside tokenizer.json
    old_ids: dict[str, int]  # content -> source id, for id_map
    sentencepiece: str | None  # the SentencePiece model file that parses, if any
    vocab: int
    method: str


def read_source(src: Path | None, vocab: int, model_type: str | None, method: str) -> Source:
    """The source's tokenizer as one JSON document: each layout reader is tried in order."""
    if src is None:
        return _from_scratch(model_type, vocab)
    folder = _open(Path(src), vocab, method)
    for reader in _READERS:
        found = reader(folder)
        if found is not None:
            return found
    raise UsageError(
        f"{src} has no tokenizer files. Expected tokenizer.json, vocab.json + merges.txt, "
        "vocab.txt, a SentencePiece .model, or tokenizer_config.json with tokenizer_class. "
        "Pass the folder of a Hub repo that includes its tokenizer."
    )


def _from_scratch(model_type: str | None, vocab: int) -> Source:
    if not model_type:
        raise UsageError(
            "shrink_tokenizer got neither a source folder nor a model_type. "
            "Without either there is nothing to shrink or train. "
            "Pass src=<folder with tokenizer files> or model_type='llama'."
        )
    name = train.class_for_model_type(model_type)
    return Source(None, train.train_json(name, vocab), {}, name, method="scratch")


def _open(src: Path, vocab: int, method: str) -> _Folder:
    if not src.is_dir():
        raise UsageError(
            f"tokenizer source {src} is not a folder. "
            "shrink_tokenizer reads a folder laid out as on the Hub. "
            "Pass the folder that holds tokenizer.json / vocab files."
        )
    config = {
        **_read_json(src / "special_tokens_map.json"),
        **_read_json(src / "tokenizer_config.json"),
    }
    if "auto_map" in config:
        raise UnsupportedModelError(
            f"{src}: the tokenizer needs remote code ({config['auto_map']}). "
            "tinykit never runs a repo's own Python code. "
            "Use a model whose tokenizer is built into transformers."
        )
    declared = _config_added_tokens(src, config)
    old_ids = {**_config_special_ids(src, config), **{e["content"]: e["id"] for e in declared}}
    sp = next(
        (n for n in files_fmt.SENTENCEPIECE_NAMES if files_fmt.read_sentencepiece(src / n)), None
    )
    return _Folder(src, config, declared, old_ids, sp, vocab, method)


def _from_retrain(f: _Folder) -> Source | None:
    """method="retrain": the source's own pipeline, retrained small on its decoded vocab."""
    if f.method != "retrain" or not has_tokenizer_files(f.path):
        return None
    tok = load_source_tokenizer(f.path, f.config)
    return Source(
        f.path,
        train.retrain_json(tok, f.vocab),
        f.config,
        _class_name(f.path, f.config, type(tok).__name__),
        "retrain",
        old_ids={**f.old_ids, **{a.content: i for i, a in tok.added_tokens_decoder.items()}},
    )


def _from_tokenizer_json(f: _Folder) -> Source | None:
    if not (f.path / "tokenizer.json").is_file():
        return None
    from tokenizers import Tokenizer

    try:
        tj = json.loads(Tokenizer.from_file(str(f.path / "tokenizer.json")).to_str())
    except Exception as e:  # tokenizers raises a bare Exception for a corrupt file
        raise UsageError(
            f"{f.path / 'tokenizer.json'} is not a tokenizer the tokenizers library reads: "
            f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}. "
            "Point at an intact tokenizer folder."
        ) from e
    # Llama-3 repos ship original/tokenizer.model (tiktoken) next to tokenizer.json
    tiktoken = next((n for n in files_fmt.TIKTOKEN_NAMES if _is_tiktoken(f.path / n)), None)
    return Source(
        f.path,
        _merge_added(tj, f.declared),
        f.config,
        _class_name(f.path, f.config, "PreTrainedTokenizerFast"),
        sentencepiece=f.sentencepiece,
        tiktoken=tiktoken if tjson.tokenizer_kind(tj) == tjson.BYTE_LEVEL_BPE else None,
        old_ids=f.old_ids,
    )


def _from_vocab_files(f: _Folder) -> Source | None:
    """vocab.json + merges.txt, vocab.txt or a SentencePiece model: transformers converts them."""
    fallback = _fallback_class(f.path, f.sentencepiece)
    if fallback is None:
        return None
    tok = _load_with_transformers(f.path, f.config, fallback)
    return Source(
        f.path,
        json.loads(tok.backend_tokenizer.to_str()),
        f.config,
        _class_name(f.path, f.config, type(tok).__name__),
        sentencepiece=f.sentencepiece,
        old_ids={**f.old_ids, **{a.content: i for i, a in tok.added_tokens_decoder.items()}},
    )


def _fallback_class(folder: Path, sentencepiece: str | None) -> str | None:
    """The class train.FALLBACK_CLASSES gives the folder's vocab files, None without any."""
    for marker, cls in train.FALLBACK_CLASSES:
        if marker.endswith(".model"):
            if sentencepiece is not None and fnmatch(sentencepiece, marker):
                return cls
        elif (folder / marker).is_file():
            return cls
    return None


def _from_tiktoken(f: _Folder) -> Source | None:
    for name in files_fmt.TIKTOKEN_NAMES:
        ranks = files_fmt.read_tiktoken(f.path / name) if (f.path / name).is_file() else None
        if ranks:
            tj = files_fmt.tiktoken_to_json(ranks, f.vocab)
            tj = _merge_added(tj, [e for e in f.declared if e["id"] >= len(ranks)])
            cls = _class_name(f.path, f.config, "PreTrainedTokenizerFast")
            return Source(f.path, tj, f.config, cls, tiktoken=name, old_ids=f.old_ids)
    return None


def _from_config_only(f: _Folder) -> Source | None:
    """Only tokenizer_config.json (the vocab is LFS-only or elsewhere): train a tokenizer of the
    declared class, keeping its special tokens and chat template."""
    if not f.config:
        return None
    cls = _class_name(f.path, f.config, "")
    if not cls:
        raise UsageError(
            f"{f.path}/tokenizer_config.json names no tokenizer_class and there is no config.json "
            "model_type, so the tokenizer class is unknown. "
            "Add tokenizer_class to tokenizer_config.json, or pass model_type=..."
        )
    essential = essential_tokens(f.path, f.config, f.declared, {})
    entries = [e for e in f.declared if e["content"] in essential]
    entries += [
        {"content": t, "special": True} for t in sorted(essential - {e["content"] for e in entries})
    ]
    tj = train.train_json(cls, f.vocab - len(entries))
    return Source(
        f.path, train.append_added_tokens(tj, entries), f.config, cls, "scratch", old_ids=f.old_ids
    )


# The layouts, in the order they are tried: the first reader that recognises the folder wins.
_READERS = (
    _from_retrain,
    _from_tokenizer_json,
    _from_vocab_files,
    _from_tiktoken,
    _from_config_only,
)


def load_source_tokenizer(src: Path, config: dict):
    if (src / "tokenizer.json").is_file():
        cls = train.tokenizer_class(_class_name(src, config, "PreTrainedTokenizerFast"))
        return cls.from_pretrained(src)
    return _load_with_transformers(src, config, "GPT2Tokenizer")


def essential_tokens(
    folder: Path | None, config: dict, added: list[dict], by_id: dict[int, str]
) -> set[str]:
    """Added tokens that must survive: named specials, chat-template and config-referenced ones."""
    essential = _named_special_tokens(config)
    template = chat_templates(folder, config)
    essential |= {a["content"] for a in added if a["content"] in template}
    essential |= {by_id[i] for i in config_token_ids(folder) if i in by_id}
    # T5-style sentinels: the tokenizer class re-creates all `extra_ids` of them on load anyway
    essential |= {a["content"] for a in added if a["content"].startswith("<extra_id_")}
    return essential
