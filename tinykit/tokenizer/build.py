"""Tiny tokenizers that keep the source's special tokens, post-processor and chat template.

`shrink_tokenizer` reads the source's files (tokenizer.json; vocab.json + merges.txt; vocab.txt;
a SentencePiece `.model`; a Llama-3 tiktoken `original/tokenizer.model`), shrinks the
tokenizers JSON by structured editing (tinykit.tokenizer.edit), mirrors the shrink into
the SentencePiece/tiktoken files it came with, and validates the result. When there is nothing
to edit (a repo with only tokenizer_config.json, or a bare model_type) it trains a small
tokenizer of the right class instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinykit._files import FolderResult, check_target, output_errors, output_path, replace_folder
from tinykit.errors import TinyArtifactInvalid, UsageError
from tinykit.tokenizer import edit as tjson
from tinykit.tokenizer import files as files_fmt
from tinykit.tokenizer import sp_model
from tinykit.tokenizer.family import family_for
from tinykit.tokenizer.parts import (
    Parts,
    config_with_defaults,
    essential_tokens,
    model_token_ids,
    read_json,
)
from tinykit.tokenizer.source import WHOLE, Source, has_tokenizer_files, read_source

__all__ = [
    "TinyTokenizer",
    "TokenizerResult",
    "has_tokenizer_files",
    "make_tiny_tokenizer",
    "replace_chat_template",
    "shrink_tokenizer",
    "write_tokenizer",
]

RECORD = "tinykit-tokenizer.json"  # what was shrunk and how, written beside the tokenizer files

# tokenizer_config.json keys that would be stale or wrong in the tiny copy.
_STALE_CONFIG_KEYS = {
    "added_tokens_decoder",
    "auto_map",
    "name_or_path",
    "special_tokens_map_file",
    "tokenizer_file",
    "vocab_file",
    "merges_file",
    "vocab_size",
}
_COPIED = ("chat_template.jinja", "chat_template.json", "special_tokens_map.json")
TEMPLATE_FILES = ("chat_template.json", "chat_template.jinja")


@dataclass(frozen=True)
class TinyTokenizer:
    """What shrink_tokenizer wrote: sizes, the kept special ids' old -> new map, file names."""

    vocab_size: int
    id_map: dict[int, int]
    files: tuple[str, ...]
    kind: str
    method: str = "edit"  # edit | retrain | scratch
    dropped: tuple[str, ...] = ()  # added tokens of the source that were not kept


def shrink_tokenizer(
    src: Path | None,
    out: Path,
    *,
    vocab: int,
    model_type: str | None = None,
    method: str = "auto",
    exact: bool = False,
    parts: Parts | None = None,
) -> TinyTokenizer:
    """Write a tiny tokenizer (≤ `vocab` ids; exactly `vocab` with `exact`) for `src` (or a bare
    `model_type`) into `out`.

    `method` is auto (edit the JSON; train when there is nothing to edit) or retrain. `exact`
    pads a smaller result with unused special tokens `<|tinykit_pad_N|>` up to `vocab` ids.
    `parts` composes it (another source's tokens, a template, tokens and roles to add) and
    names the model config's special ids, which the result keeps (`id_map`); without it, the
    config.json beside `src` names them.
    Raises TinyArtifactInvalid if the result fails check_tokenizer.
    """
    if vocab < 16:
        raise UsageError(
            f"--vocab {vocab} is too small. A tokenizer needs room for its special "
            "and byte tokens. Pass --vocab 512 or more."
        )
    if method not in ("auto", "retrain"):
        raise UsageError(
            f"method {method!r} is unknown. Expected 'auto' or 'retrain'. "
            "Pass method='auto' unless editing fails."
        )
    if parts is None:  # called on a folder alone: its own config.json names the model
        config = read_json(Path(src) / "config.json") if src is not None else {}
        model_type = model_type or config.get("model_type")
        parts = model_parts(config, None if src is None else Path(src), model_type)
    source = read_source(src, vocab, model_type, method, parts)
    tj, dropped = source.tj, list[str]()
    old_to_new: dict[int, int] = {}
    config_ids = {i for _, i in parts.config_ids}
    if source.method == "edit":
        vocab_before = tjson.model_vocab(tj)
        by_id = {i: vocab_before[i] for i in config_ids if i < len(vocab_before)}
        by_id.update({a["id"]: a["content"] for a in tj.get("added_tokens", [])})
        added = tj.get("added_tokens", [])
        essential = essential_tokens(source.extras, source.config, added, by_id, parts)
        # the source's special tokens (Llama 3's 256-token block) all stay while they fit
        specials = {a["content"] for a in added if a.get("special")}
        if len(essential | specials) <= vocab // 2:
            essential |= specials
        tj, old_to_new, dropped = tjson.shrink_json(tj, vocab, essential, base=vocab_before)
    else:
        tj = tjson.drop_precompiled_normalizer(source.tj)
        if tjson.vocab_size(tj) > vocab:
            # trainers do not count added tokens or a forced alphabet: trim like any source
            every_added = {a["content"] for a in tj.get("added_tokens", [])}
            tj, _, dropped = tjson.shrink_json(tj, vocab, every_added)
    if exact:
        tj = tjson.pad_added_tokens(tj, vocab)
    out = Path(out)
    written = _write(out, source, tj, parts)
    new_ids = {a["content"]: a["id"] for a in tj.get("added_tokens", [])}
    if source.method == "edit":
        wanted = {a["id"] for a in source.tj.get("added_tokens", [])} | config_ids
        id_map = {old: new for old, new in old_to_new.items() if old in wanted}
    else:
        id_map = {old: new_ids[c] for c, old in source.old_ids.items() if c in new_ids}
    report = _check(out)
    result = TinyTokenizer(
        vocab_size=report["vocab_size"],
        id_map=dict(sorted(id_map.items())),
        files=written,
        kind=report["kind"],
        method=source.method,
        dropped=tuple(dropped),
    )
    if exact and report["vocab_size"] != vocab:
        raise TinyArtifactInvalid(
            f"the tiny tokenizer in {out} has {report['vocab_size']} ids, not exactly --vocab "
            f"{vocab}: the tokenizer class does not load the padding tokens. Drop --exact-vocab, "
            "or report the source.",
            report=report,
        )
    if report["vocab_size"] > vocab:
        raise TinyArtifactInvalid(
            f"tiny tokenizer in {out} has {report['vocab_size']} ids, more than --vocab {vocab}. "
            "This is a tinykit bug. Report it with the source folder.",
            report=report,
        )
    return result


def write_tokenizer(src: Path, out: Path, *, parts: Parts, model_type: str | None = None) -> int:
    """Write the whole tokenizer of `src` (every id kept) composed with `parts` into `out`:
    tokenizer.json and tokenizer_config.json for a layout transformers cannot load as it is (a
    tiktoken rank file alone) or a composition. Returns its length; raises TinyArtifactInvalid
    when the result fails check_tokenizer."""
    source = read_source(src, WHOLE, model_type, "auto", parts)
    _write(out, source, source.tj, parts)
    return _check(out)["vocab_size"]


def _check(out: Path) -> dict:
    from tinykit.tokenizer.check import check_tokenizer

    report = check_tokenizer(out)
    if not report["ok"]:
        raise TinyArtifactInvalid(
            f"tiny tokenizer in {out} failed validation: {'; '.join(report['problems'])}. "
            "The shrink broke an invariant. Retry with method='retrain', and report the source.",
            report=report,
        )
    return report


def _write(out: Path, source: Source, tj: dict, parts: Parts) -> tuple[str, ...]:
    from tokenizers import Tokenizer

    out.mkdir(parents=True, exist_ok=True)
    # Round-trip through tokenizers: it validates the document and writes its canonical form
    # (compact: indentation alone would double the file).
    Tokenizer.from_str(json.dumps(tj)).save(str(out / "tokenizer.json"), pretty=False)
    config = {k: v for k, v in source.config.items() if k not in _STALE_CONFIG_KEYS}
    config["tokenizer_class"] = source.tokenizer_class
    config["added_tokens_decoder"] = {
        str(a["id"]): {
            k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
        }
        for a in sorted(tj.get("added_tokens", []), key=lambda a: a["id"])
    }
    (out / "tokenizer_config.json").write_text(
        json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n", "utf-8"
    )
    written = ["tokenizer.json", "tokenizer_config.json"]
    if source.extras is not None:
        for name in _COPIED:
            if (source.extras / name).is_file():
                shutil.copyfile(source.extras / name, out / name)
                written.append(name)
    if parts.template is not None:
        replace_chat_template(out, parts.template)
        written = [n for n in written if n not in TEMPLATE_FILES] + ["chat_template.jinja"]
    vocab = tjson.model_vocab(tj)
    if source.method == "edit" and source.sentencepiece and source.folder is not None:
        target = out / source.sentencepiece
        src = source.folder / source.sentencepiece
        if sp_model.shrink_sentencepiece(src, target, vocab, model=source.sentencepiece_model):
            written.append(source.sentencepiece)
    if source.method == "edit" and source.tiktoken:
        special = {a["content"] for a in tj.get("added_tokens", [])}
        files_fmt.write_tiktoken(out / source.tiktoken, vocab, special)
        written.append(source.tiktoken)
    return tuple(sorted(written))


def replace_chat_template(folder: Path, template: Path) -> str:
    """Make `template`'s text the only chat template of the tokenizer in `folder`; return its
    sha256."""
    from tinykit._files import sha256_file

    try:
        text = Path(template).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(
            f"--chat-template {template} cannot be read: {e}. Pass a UTF-8 Jinja file."
        ) from e
    if not text.strip():
        raise UsageError(f"--chat-template {template} is empty. Pass a Jinja chat template file.")
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text("utf-8")) if config_path.is_file() else {}
    if "chat_template" in config:  # transformers would read it beside the .jinja file
        del config["chat_template"]
        config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", "utf-8")
    for name in TEMPLATE_FILES:
        (folder / name).unlink(missing_ok=True)
    (folder / "chat_template.jinja").write_text(text, "utf-8")
    return sha256_file(Path(template))


def tokenizer_folder(folder: Path | None) -> Path | None:
    """`folder` when it describes a tokenizer (vocabulary files, or a tokenizer_config.json to
    train one from); None means: train one for the bare model_type."""
    if folder is not None and (
        has_tokenizer_files(folder) or (folder / "tokenizer_config.json").is_file()
    ):
        return folder
    return None


def model_parts(
    config: dict[str, Any],
    folder: Path | None,
    model_type: str | None,
    recipes: tuple[str, ...] = (),
    **parts: Any,
) -> Parts:
    """The Parts a model's tokenizer keeps: the special ids its config and generation config
    name, its vocab size, and its family's tokens (plus any other `parts` fields)."""
    generation = read_json(folder / "generation_config.json") if folder is not None else {}
    config = config_with_defaults(config)
    text = config.get("text_config")
    vocab = config.get("vocab_size") or (text.get("vocab_size") if isinstance(text, dict) else None)
    return Parts(
        config_ids=model_token_ids(config, generation),
        model_vocab=vocab if isinstance(vocab, int) else None,
        family=family_for(model_type, recipes),
        **parts,
    )


@dataclass(frozen=True)
class TokenizerResult(FolderResult):
    """What make_tiny_tokenizer wrote; `to_dict()` is the CLI's --json output. Stands in for `path`."""

    path: Path
    source: str
    revision: str | None
    vocab: int
    vocab_size: int
    kind: str
    method: str
    id_map: dict[int, int]
    dropped: tuple[str, ...]
    size_bytes: int

    def record(self) -> dict[str, Any]:
        """The content of tinykit-tokenizer.json (no path, no size: same bytes on any machine)."""
        return {
            "source": self.source,
            "revision": self.revision,
            "vocab": self.vocab,
            "vocab_size": self.vocab_size,
            "kind": self.kind,
            "method": self.method,
            "id_map": {str(k): v for k, v in self.id_map.items()},
            "dropped_added_tokens": list(self.dropped),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.record(), "out": str(self.path), "size_bytes": self.size_bytes}


def make_tiny_tokenizer(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    vocab: int = 1024,
    method: str = "auto",
    force: bool = False,
) -> TokenizerResult:
    """Shrink the tokenizer of `source` to ≤ `vocab` ids; write it to `out` atomically.

    `source` is a folder laid out as on the Hub, a Hub id `org/name[@revision]` (tokenizer and
    config files only are downloaded) or a bare model_type (a tokenizer is trained for it).
    `out` defaults to ./tiny-<name>-tokenizer; it must be missing or empty unless `force`.
    """
    from tinykit.source import resolve

    if isinstance(vocab, bool) or not isinstance(vocab, int):
        raise UsageError(f"vocab={vocab!r} is not an integer. Pass e.g. vocab=512.")
    if not isinstance(source, (str, os.PathLike)):
        raise UsageError(
            f"source={source!r} is not a folder, Hub id or model_type. Pass one as a str or Path."
        )
    if out is not None:  # refuse before the (possibly remote) source is read
        check_target(output_path(out, ""), force)
    src: Path | None
    if Path(source).is_dir():  # a tokenizer folder needs no config.json
        name, revision = Path(source).resolve().name, None
        config = read_json(Path(source) / "config.json")
        src, model_type = tokenizer_folder(Path(source)), config.get("model_type")
        if src is None and model_type is None:
            raise UsageError(
                f"{source} has no tokenizer files and no config.json naming a model_type, so "
                "there is nothing to shrink or train. Pass a folder with tokenizer.json or vocab "
                "files, a Hub id, or a model_type."
            )
    else:
        resolved = resolve(source)
        src, model_type = tokenizer_folder(resolved.folder), resolved.model_type
        name, revision, config = resolved.short_name, resolved.revision, resolved.config
    parts = model_parts(config, None if src is None else Path(src), model_type)
    target = output_path(out, Path.cwd() / f"tiny-{name}-tokenizer")
    with output_errors(target), replace_folder(target, force=force) as staging:
        tiny = shrink_tokenizer(
            src, staging, vocab=vocab, model_type=model_type, method=method, parts=parts
        )
        result = TokenizerResult(
            path=target,
            source=name,
            revision=revision,
            vocab=vocab,
            vocab_size=tiny.vocab_size,
            kind=tiny.kind,
            method=tiny.method,
            id_map=tiny.id_map,
            dropped=tiny.dropped,
            size_bytes=0,
        )
        record = json.dumps(result.record(), indent=2, sort_keys=True) + "\n"
        (staging / RECORD).write_text(record, "utf-8")
        size = sum(p.stat().st_size for p in staging.rglob("*") if p.is_file())
    return dataclasses.replace(result, size_bytes=size)
