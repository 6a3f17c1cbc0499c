"""Read a tokenizer source folder into one tokenizers JSON document plus what must survive.

Every layout becomes a tokenizer.json document: tokenizer.json as is; vocab.json + merges.txt,
vocab.txt and SentencePiece `.model` files converted by transformers; a tiktoken rank file by
tinykit.tokenizer.files (its special block named from the tokenizer config, the family's
recipe, or reserved names); and a repo with only tokenizer_config.json, or nothing at all, by
training a small tokenizer of the declared (else the type's, the family's, a byte-level BPE)
class. The parts (tinykit.tokenizer.parts) add another source's tokens and config, tokens and
roles of their own, and a token for every special id the model config names.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from tinykit.errors import UnsupportedModelError, UsageError
from tinykit.tokenizer import edit as tjson
from tinykit.tokenizer import files as files_fmt
from tinykit.tokenizer import sp_model
from tinykit.tokenizer import train as train
from tinykit.tokenizer.parts import (
    Parts,
    essential_tokens,
    name_config_ids,
    named_special_tokens,
    read_json,
    role_tokens,
    token_text,
)

WHOLE = 10**7
"""A vocab limit above any real vocabulary's: the whole tokenizer is read (every id kept)."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


@dataclass
class Source:
    folder: Path | None
    tj: dict
    config: dict
    tokenizer_class: str
    method: str = "edit"
    sentencepiece: str | None = None  # relative file name to mirror
    sentencepiece_model: sp_model.SentencePieceModel | None = None  # that file, parsed once
    tiktoken: str | None = None
    old_ids: dict[str, int] = field(default_factory=dict)  # content -> source id, for id_map
    tokens: Path | None = None  # where the tokenizer config and template came from

    @property
    def extras(self) -> Path | None:
        """The folder whose template and special-tokens files ship beside the tokenizer."""
        return self.tokens or self.folder


def has_tokenizer_files(folder: Path) -> bool:
    """True when `folder` holds a vocabulary (tokenizer_config.json alone does not count)."""
    folder = Path(folder)
    if (folder / "tokenizer.json").is_file() or (folder / "vocab.txt").is_file():
        return True
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        return True
    return any(
        (folder / n).is_file() for n in (*sp_model.SENTENCEPIECE_NAMES, *files_fmt.TIKTOKEN_NAMES)
    )


def tokenizer_config(folder: Path) -> dict:
    """special_tokens_map.json under tokenizer_config.json: the source's tokenizer config."""
    return {
        **read_json(folder / "special_tokens_map.json"),
        **read_json(folder / "tokenizer_config.json"),
    }


def _config_special_ids(config: dict, parts: Parts) -> dict[str, int]:
    """token -> source id for the specials the model config names by id (bos_token_id -> the
    tokenizer config's bos_token)."""
    ids: dict[str, int] = {}
    for key, value in parts.config_ids:
        if key.endswith("_token_id"):
            token = token_text(config.get(key.removesuffix("_id")))
            if token:
                ids.setdefault(token, value)
    return ids


def _config_added_tokens(folder: Path | None, config: dict) -> list[dict]:
    """Added tokens declared outside tokenizer.json (added_tokens_decoder, added_tokens.json)."""
    entries = [{**v, "id": int(k)} for k, v in config.get("added_tokens_decoder", {}).items()]
    if folder is not None:
        known = {e["content"] for e in entries}
        for content, idx in read_json(folder / "added_tokens.json").items():
            if content not in known:
                entries.append({"content": content, "id": idx, "special": True})
    return sorted(entries, key=lambda e: e["id"])


def _merge_added(tj: dict, entries: list[dict]) -> dict:
    """Add config-declared tokens missing from tokenizer.json, at their declared ids when free."""
    have = {a["content"] for a in tj.get("added_tokens", [])}
    if all(e["content"] in have for e in entries):  # the usual case: no 150k-token pass
        return tj
    vocab = {tok: i for i, tok in enumerate(tjson.model_vocab(tj))}
    taken = {a["id"] for a in tj.get("added_tokens", [])} | set(vocab.values())
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


@dataclass
class _Folder:
    """What every layout reader needs: the folders, the tokenizer config, the ids to keep."""

    path: Path
    config: dict
    declared: list[dict]  # added tokens declared outside tokenizer.json
    old_ids: dict[str, int]  # content -> source id, for id_map
    sentencepiece: str | None  # the SentencePiece model file that parses, if any
    sentencepiece_model: sp_model.SentencePieceModel | None  # that file, parsed
    vocab: int
    method: str
    parts: Parts
    model_type: str | None
    tokens: Path | None  # the tokens part's folder, when it is not `path`

    def class_name(self, fallback: str) -> str:
        """The declared tokenizer class when transformers knows it (a transformers-4 name
        too), else the model type's own, else the family's, else `fallback`."""
        declared = self.config.get("tokenizer_class")
        if declared and train.known_class(declared):
            return declared
        return train.type_class(self.model_type) or self.parts.family.tokenizer_class or fallback

    def source(
        self, tj: dict, cls: str, method: str = "edit", *, config: dict | None = None, **kw: Any
    ) -> Source:
        """A Source read from this folder (its tokenizer config unless `config` replaces it)."""
        config = self.config if config is None else config
        return Source(self.path, tj, config, cls, method, tokens=self.tokens, **kw)


def read_source(
    src: Path | None, vocab: int, model_type: str | None, method: str, parts: Parts | None = None
) -> Source:
    """The source's tokenizer as one JSON document, with the parts applied: each layout reader
    is tried in order; without a folder one is trained for `model_type`."""
    parts = parts or Parts()
    if src is None and parts.tokens is not None:  # no vocabulary: train one, with these tokens
        found = _from_config_only(_open(parts.tokens, vocab, method, parts, model_type))
        if found is not None:
            return _with_parts(found, parts)
    if src is None:
        return _with_parts(_from_scratch(model_type, vocab, parts), parts)
    folder = _open(Path(src), vocab, method, parts, model_type)
    found = next((s for reader in _READERS if (s := reader(folder)) is not None), None)
    if found is None:
        raise UsageError(
            f"{src} has no tokenizer files. Expected tokenizer.json, vocab.json + merges.txt, "
            "vocab.txt, a SentencePiece .model, or tokenizer_config.json. Pass the folder "
            "of a Hub repo that includes its tokenizer, or --tokenizer SOURCE."
        )
    return _with_parts(found, parts)


def _from_scratch(model_type: str | None, vocab: int, parts: Parts) -> Source:
    if not model_type:
        raise UsageError(
            "shrink_tokenizer got neither a source folder nor a model_type. "
            "Without either there is nothing to shrink or train. "
            "Pass src=<folder with tokenizer files> or model_type='llama'."
        )
    trained = train.train_first(train.candidates(model_type, parts.family), vocab)
    source = Source(None, trained.tj, {}, trained.tokenizer_class, method="scratch")
    return _name_config_ids(source, parts, vocab, trained.roles)


def _open(src: Path, vocab: int, method: str, parts: Parts, model_type: str | None) -> _Folder:
    for folder in (src, parts.tokens):
        if folder is not None and not folder.is_dir():
            raise UsageError(
                f"tokenizer source {folder} is not a folder. "
                "A tokenizer is read from a folder laid out as on the Hub. "
                "Pass the folder that holds tokenizer.json / vocab files."
            )
    tokens = parts.tokens if parts.tokens is not None and parts.tokens != src else None
    config = tokenizer_config(tokens or src)
    if "auto_map" in config:
        raise UnsupportedModelError(
            f"{tokens or src}: the tokenizer needs remote code ({config['auto_map']}). "
            "tinykit never runs a repo's own Python code. "
            "Pass --tokenizer SOURCE with a tokenizer transformers builds itself."
        )
    declared = _config_added_tokens(tokens or src, config)
    old_ids = {**_config_special_ids(config, parts), **{e["content"]: e["id"] for e in declared}}
    parsed = ((n, sp_model.read_sentencepiece(src / n)) for n in sp_model.SENTENCEPIECE_NAMES)
    sp, sp_parsed = next(((n, m) for n, m in parsed if m is not None), (None, None))
    return _Folder(
        src, config, declared, old_ids, sp, sp_parsed, vocab, method, parts, model_type, tokens
    )


def _from_retrain(f: _Folder) -> Source | None:
    """method="retrain": the source's own pipeline, retrained small on its decoded vocab."""
    if f.method != "retrain" or not has_tokenizer_files(f.path):
        return None
    tok = load_source_tokenizer(f)
    return f.source(
        train.retrain_json(tok, f.vocab),
        f.class_name(type(tok).__name__),
        "retrain",
        old_ids={**f.old_ids, **{a.content: i for i, a in tok.added_tokens_decoder.items()}},
    )


def _from_tokenizer_json(f: _Folder) -> Source | None:
    if not (f.path / "tokenizer.json").is_file():
        return None
    from tinykit.tokenizer.canonical import read_tokenizer_json

    try:
        tj = read_tokenizer_json(f.path / "tokenizer.json")
    except Exception as e:  # tokenizers raises a bare Exception for a corrupt file
        raise UsageError(
            f"{f.path / 'tokenizer.json'} is not a tokenizer the tokenizers library reads: "
            f"{_first_line(e)}. "
            "Point at an intact tokenizer folder."
        ) from e
    # Llama-3 repos ship original/tokenizer.model (tiktoken) next to tokenizer.json
    tiktoken = next((n for n in files_fmt.TIKTOKEN_NAMES if _is_tiktoken(f.path / n)), None)
    return f.source(
        _merge_added(tj, f.declared),
        f.class_name("PreTrainedTokenizerFast"),
        sentencepiece=f.sentencepiece,
        sentencepiece_model=f.sentencepiece_model,
        tiktoken=tiktoken if tjson.tokenizer_kind(tj) == tjson.BYTE_LEVEL_BPE else None,
        old_ids=f.old_ids,
    )


def _from_vocab_files(f: _Folder) -> Source | None:
    """vocab.json + merges.txt, vocab.txt or a SentencePiece model: transformers converts them."""
    fallback = _fallback_class(f.path, f.sentencepiece)
    if fallback is None:
        return None
    tj = _quick_vocab_merges(f, fallback)
    if tj is not None:
        cls_name = _vocab_class(f, fallback).__name__
    else:
        tok = _load_with_transformers(f, fallback)
        tj, cls_name = json.loads(tok.backend_tokenizer.to_str()), type(tok).__name__
    own = {a["content"]: a["id"] for a in tj["added_tokens"]}  # as added_tokens_decoder
    return f.source(
        _merge_added(tj, f.declared),
        f.class_name(cls_name),
        sentencepiece=f.sentencepiece,
        sentencepiece_model=f.sentencepiece_model,
        old_ids={**f.old_ids, **own},
    )


def _quick_vocab_merges(f: _Folder, fallback: str) -> dict | None:
    """vocab.json + merges.txt read without building the BPE (None: take the full read)."""
    merges_class = dict(train.FALLBACK_CLASSES)["merges.txt"]
    if fallback != merges_class or not (f.path / "vocab.json").is_file():
        return None
    from tinykit.tokenizer.canonical import read_vocab_merges

    return read_vocab_merges(f.path, _vocab_class(f, fallback), whole=f.vocab >= WHOLE)


def _vocab_class(f: _Folder, fallback: str) -> Any:
    """The class that reads the folder's vocab files: a tokens part's class may read others."""
    return train.tokenizer_class(f.class_name(fallback) if f.tokens is None else fallback)


def _fallback_class(folder: Path, sentencepiece: str | None) -> str | None:
    """The class train.FALLBACK_CLASSES gives the folder's vocab files, None without any."""
    for marker, cls in train.FALLBACK_CLASSES:
        if marker.endswith(".model"):
            if sentencepiece is not None and fnmatch(sentencepiece, marker):
                return cls
        elif (folder / marker).is_file():
            return cls
    return None


def _load_with_transformers(f: _Folder, fallback: str):
    """Load vocab.json+merges.txt, vocab.txt or SentencePiece sources (transformers converts)."""
    cls = _vocab_class(f, fallback)
    try:
        tok = cls.from_pretrained(f.path)
    except Exception as e:  # tokenizers raises a bare Exception for a damaged file
        raise UsageError(
            f"{f.path}: its vocab files do not load with {cls.__name__}: {_first_line(e)}. "
            "Point at an intact tokenizer folder, or pass --tokenizer SOURCE."
        ) from e
    if len(tok) <= len(tok.all_special_tokens) + 3:
        # transformers 5 silently builds an empty tokenizer when it finds no usable file
        raise UsageError(
            f"{f.path}: {cls.__name__} loaded only {len(tok)} tokens from the vocab files. "
            "The files are not in the layout this class reads. "
            "Add a tokenizer.json, or a tokenizer_config.json naming the right tokenizer_class."
        )
    return tok


def _from_tiktoken(f: _Folder) -> Source | None:
    for name in files_fmt.TIKTOKEN_NAMES:
        ranks = files_fmt.read_tiktoken(f.path / name) if (f.path / name).is_file() else None
        if ranks:
            tj = files_fmt.tiktoken_to_json(ranks, f.vocab)
            declared = [e for e in f.declared if e["id"] >= len(ranks)]
            if not declared:  # the block the model's vocab holds after the ranks, named
                size = (f.parts.model_vocab or len(ranks)) - len(ranks)
                names = f.parts.family.block_names(max(size, 0))
                declared = [{"content": t, "id": len(ranks) + i} for i, t in enumerate(names)]
            old_ids = {**f.old_ids, **{e["content"]: e["id"] for e in declared}}
            by_id = {e["id"]: e["content"] for e in declared}
            config = {**role_tokens(f.parts.config_ids, by_id), **f.config}
            tj = _merge_added(tj, declared)
            if config.get("bos_token"):  # transformers' Llama-3 conversion adds bos, as Meta's
                tj = files_fmt.with_specials(tj, token_text(config["bos_token"]))
            cls = f.class_name("PreTrainedTokenizerFast")
            return f.source(tj, cls, config=config, tiktoken=name, old_ids=old_ids)
    return None


def _from_config_only(f: _Folder) -> Source | None:
    """Only tokenizer_config.json (the vocab is LFS-only or elsewhere): train a tokenizer of the
    declared class (else the type's, the family's, a byte-level BPE), keeping its special
    tokens and chat template."""
    if not f.config:
        return None
    essential = essential_tokens(f.tokens or f.path, f.config, f.declared, {}, f.parts)
    entries = [e for e in f.declared if e["content"] in essential]
    entries += [
        {"content": t, "special": True} for t in sorted(essential - {e["content"] for e in entries})
    ]
    declared = f.config.get("tokenizer_class")
    names = [declared] if declared and train.known_class(declared) else []
    try:
        names += train.candidates(f.model_type, f.parts.family)
    except UnsupportedModelError:  # a remote-code or text-less type: the generic fallbacks
        names += train.candidates(None, f.parts.family)
    trained = train.train_first(names, f.vocab - len(entries))
    tj = train.append_added_tokens(trained.tj, entries)
    source = f.source(tj, trained.tokenizer_class, "scratch", old_ids=f.old_ids)
    return _name_config_ids(source, f.parts, f.vocab, trained.roles)


# The layouts, in the order they are tried: the first reader that recognises the folder wins.
_READERS = (
    _from_retrain,
    _from_tokenizer_json,
    _from_vocab_files,
    _from_tiktoken,
    _from_config_only,
)


def load_source_tokenizer(f: _Folder):
    if (f.path / "tokenizer.json").is_file():
        return train.tokenizer_class(f.class_name("PreTrainedTokenizerFast")).from_pretrained(
            f.path
        )
    return _load_with_transformers(f, "GPT2Tokenizer")


def _name_config_ids(source: Source, parts: Parts, vocab: int, defaults: dict[str, str]) -> Source:
    """A trained tokenizer gets a token for each special id the model config names (the
    source's or family's token of that id, its class's token of that role, else a new one),
    the family's tokens, and every role in its config: the class that loads it may not be the
    class it was trained as (transformers loads some types with its generic backend). A new
    token takes its config id where the trained vocabulary has it (`tjson.place_tokens`)."""
    family = parts.family
    known = {**family.special, **family.added, **{i: t for t, i in source.old_ids.items()}}
    roles = {r: token_text(source.config.get(f"{r}_token")) or t for r, t in defaults.items()}
    own = {a["id"]: a["content"] for a in source.tj.get("added_tokens", []) if a.get("special")}
    names = name_config_ids(parts.config_ids, known, roles, own)
    tokens = [*names.values(), *family.tokens()]
    new = [{"content": t, "special": family.is_special(t)} for t in tokens]
    tj = train.append_added_tokens(source.tj, new)
    if tjson.vocab_size(tj) > vocab:  # make room: trim the trained vocab, keep every added token
        tj, _, _ = tjson.shrink_json(tj, vocab, {a["content"] for a in tj["added_tokens"]})
    tj = tjson.place_tokens(tj, names)  # the config's ids kept where the vocab has them
    config = {f"{r}_token": t for r, t in roles.items()}
    config.update(role_tokens(parts.config_ids, names))
    config.update(
        {k: v for k, v in source.config.items() if token_text(v) is not None or k not in config}
    )
    old_ids = {t: i for i, t in {**family.special, **family.added}.items()}
    old_ids.update({t: i for i, t in names.items()})
    old_ids.update(source.old_ids)
    return dataclasses.replace(source, tj=tj, config=config, old_ids=old_ids)


def _with_parts(source: Source, parts: Parts) -> Source:
    """The parts' own tokens and roles on top (added after every id, roles in the config), and
    a tokens part's add_bos_token / add_eos_token in the post-processor (the vocabulary
    source's may add what the tokens source's config says it does not: Phi-3 on Llama-2)."""
    if parts.add_tokens or parts.special_tokens:
        entries = [{"content": t, "special": False} for t in parts.add_tokens]
        named = sorted(named_special_tokens(parts.special_tokens))
        entries += [{"content": t, "special": True} for t in named]
        source.tj = train.append_added_tokens(source.tj, entries)
        source.config = {**source.config, **parts.special_tokens}
    adds = {k: source.config.get(f"add_{k}_token") for k in ("bos", "eos")}
    if source.tokens is not None and any(isinstance(v, bool) for v in adds.values()):
        bos, eos = (token_text(source.config.get(f"{k}_token")) if adds[k] else None for k in adds)
        source.tj = files_fmt.with_specials(source.tj, bos, eos)
    return source
