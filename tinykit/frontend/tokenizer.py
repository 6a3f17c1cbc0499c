"""The tokenizer a tiny model ships: shrunk (tiny mode) or the real one (faithful mode), from the
config's source or another (`--tokenizer SOURCE`), composed with another source's tokens
(`--tokens-from`), tokens and roles of its own and a chat template, and keeping the special ids
the model config names (tinykit.tokenizer.parts).

Faithful mode reads the layouts tiny mode reads: tokenizer.json, vocab files, SentencePiece
models, and a Llama-3 tiktoken `original/tokenizer.model` alone (converted to a full
tokenizer.json and tokenizer_config.json, ids unchanged, its special block named). A folder it
cannot make a loading tokenizer of is an error, never a model shipped without one.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tinykit._files import sha256_file
from tinykit.errors import TinyArtifactInvalid, UnsupportedModelError, UsageError
from tinykit.frontend.processor_files import PROCESSOR_FILES
from tinykit.hub.layout import SHARD_INDEX_SUFFIX, WEIGHT_SUFFIXES

if TYPE_CHECKING:
    from collections.abc import Collection

    from tinykit.source import Source
    from tinykit.tokenizer.parts import Parts


class TokenizerChoices(Protocol):
    """The build choices the tokenizer reads (model/choices.py's BuildChoices holds them)."""

    @property
    def tokenizer(self) -> str | None: ...
    @property
    def tokens(self) -> str | None: ...
    @property
    def chat_template(self) -> str | None: ...
    @property
    def add_tokens(self) -> tuple[str, ...]: ...
    @property
    def special_tokens(self) -> dict[str, Any] | None: ...
    @property
    def exact_vocab(self) -> bool: ...


class TokenizerSpec(Protocol):
    """The sizes the tokenizer reads (model/spec.py's ShrinkSpec holds them)."""

    @property
    def mode(self) -> str: ...
    @property
    def vocab(self) -> int: ...


NOT_TOKENIZER = {
    "config.json",
    "generation_config.json",
    "README.md",
    "params.json",
    ".gitattributes",
    "tinykit.json",
    *PROCESSOR_FILES,
}
# Never copied as tokenizer files: weights, a sharded checkpoint's index, and code.
NOT_TOKENIZER_SUFFIXES = (*sorted(WEIGHT_SUFFIXES), SHARD_INDEX_SUFFIX, ".py")
# Token-id attributes a foreign tokenizer's ids replace in the config and generation config.
SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "sep_token_id")
# The files a tokens part (`--tokens-from`) supplies in faithful mode, instead of the vocab source's.
TOKENS_FILES = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.json",
    "chat_template.jinja",
)


@dataclass(frozen=True)
class TokenizerSource:
    """Where the tokenizer comes from: the config's source, or the one --tokenizer names."""

    folder: Path | None
    model_type: str | None
    name: str
    origin: str  # Source.origin: "folder", "model_type" or "hub"
    revision: str | None
    foreign: bool
    config: dict[str, Any] = field(default_factory=dict)
    """The model config beside it (its special ids name the tokenizer's tokens)."""


@dataclass(frozen=True)
class Shipped:
    """What was written: the tokenizer's length, the source->tiny special-id map (tiny mode,
    own source), a foreign tokenizer's special ids, and provenance of the choices."""

    vocab_size: int | None = None
    id_map: dict[int, int] | None = None
    special_ids: dict[str, int] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)


def tokenizer_source(
    src: Source | None, choice: str | None, trust_remote_code: bool
) -> TokenizerSource:
    """The config's source, or `choice` (a folder, with or without config.json; a Hub id; a
    model_type) resolved as make-tiny resolves a source."""
    from tinykit.source import folder_digest, resolve

    if choice is None:
        assert src is not None
        return TokenizerSource(
            src.folder, src.model_type, src.name, src.origin, src.revision, False, src.config
        )
    path = Path(choice).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():  # a tokenizer folder alone
        return TokenizerSource(path, None, choice, "folder", folder_digest(path), foreign=True)
    other = resolve(choice, None, trust_remote_code)
    return TokenizerSource(
        other.folder, other.model_type, choice, other.origin, other.revision, True, other.config
    )


def parts_for(
    tok: TokenizerSource,
    choices: TokenizerChoices,
    trust_remote_code: bool,
    recipes: tuple[str, ...],
) -> tuple[Parts, dict[str, Any]]:
    """The parts the tokenizer is composed of (the model config's special ids, the family's
    tokens, the choices' tokens source, template and additions), and their provenance."""
    from tinykit.tokenizer.build import model_parts

    record: dict[str, Any] = {}
    tokens = None
    if choices.tokens is not None:
        tokens = tokenizer_source(None, choices.tokens, trust_remote_code)
        if tokens.folder is None:
            raise UsageError(
                f"--tokens-from {choices.tokens} is a bare model_type, which has no tokenizer "
                "config or added tokens to take. Pass a folder or Hub id that has them."
            )
        record["tokens_source"] = {
            "name": tokens.name,
            "kind": tokens.origin,
            "revision": tokens.revision,
        }
    template = choices.chat_template
    parts = model_parts(
        tok.config,
        tok.folder,
        tok.model_type,
        recipes,
        tokens=None if tokens is None else tokens.folder,
        template=None if template is None else Path(template).expanduser(),
        add_tokens=choices.add_tokens,
        special_tokens=choices.special_tokens or {},
    )
    return parts, record


def composed(choices: TokenizerChoices) -> bool:
    """Whether the tokenizer is more than one source's files (tokens, additions, roles)."""
    return bool(choices.tokens or choices.add_tokens or choices.special_tokens)


def ship(
    tmp: Path,
    src: Source,
    spec: TokenizerSpec,
    choices: TokenizerChoices,
    takes_text: bool,
    trust_remote_code: bool = False,
    recipes: tuple[str, ...] = (),
) -> Shipped:
    """Write the tokenizer files into `tmp` (none for a model without text input)."""
    tok = tokenizer_source(src, choices.tokenizer, trust_remote_code)
    parts, record = parts_for(tok, choices, trust_remote_code, recipes)
    if tok.foreign:
        record["tokenizer_source"] = {
            "name": tok.name,
            "kind": tok.origin,
            "revision": tok.revision,
        }
    if spec.mode == "tiny":
        tiny = _shrink(tok, spec, choices, tmp, takes_text, parts)
        if tiny is None:
            _check_no_tokenizer_options(src.name, tok, choices)
            return Shipped()
        vocab_size, id_map = tiny.vocab_size, None if tok.foreign else tiny.id_map
    else:
        copy_real_tokenizer(tok, tmp, parts, composed(choices))
        vocab_size, id_map = None, None
    if choices.chat_template:
        record["chat_template_sha256"] = sha256_file(Path(choices.chat_template).expanduser())
    if vocab_size is not None and not tok.foreign and not choices.chat_template:
        return Shipped(vocab_size, id_map, {}, record)  # a tiny tokenizer checked as it was built
    built = Shipped(vocab_size, id_map, {}, record)
    return _as_loaded(built, _load(tmp, tok.name, src.config), tok, choices.chat_template)


def _as_loaded(built: Shipped, loaded: Any, tok: TokenizerSource, template: str | None) -> Shipped:
    """`built` completed from the tokenizer as transformers loads it (its template checked):
    its length where the build did not count it, a foreign tokenizer's special ids."""
    _check_template(loaded, template)
    special = {k: v for k in SPECIAL_IDS if isinstance(v := getattr(loaded, k, None), int)}
    return Shipped(
        vocab_size=built.vocab_size if built.vocab_size is not None else len(loaded),
        id_map=built.id_map,
        special_ids=special if tok.foreign else {},
        record=built.record,
    )


def _check_no_tokenizer_options(name: str, tok: TokenizerSource, choices: TokenizerChoices) -> None:
    """A model that takes no text gets no tokenizer: the tokenizer options are a mistake."""
    if choices.exact_vocab or choices.chat_template or tok.foreign or composed(choices):
        raise UsageError(
            f"{name} takes no text, so no tokenizer is built and the tokenizer "
            "options (--exact-vocab, --tokenizer, --tokens-from, --chat-template, "
            "--add-token, --special-token) do not apply. Drop them."
        )


def _check_template(loaded: Any, chat_template: str | None) -> None:
    """The loaded tokenizer's template is the --chat-template file's text."""
    if chat_template and loaded.chat_template != Path(chat_template).read_text():
        raise TinyArtifactInvalid(
            f"the tokenizer in the build does not load --chat-template {chat_template} as "
            "its template. This is a tinykit bug: report it with the tokenizer source."
        )


def _shrink(
    tok: TokenizerSource,
    spec: TokenizerSpec,
    choices: TokenizerChoices,
    out: Path,
    text: bool,
    parts: Parts,
):
    """Tiny mode: the source's tokenizer shrunk, or one trained for the architecture (a bare
    model_type, or a folder without vocabulary files). Models without text input get none."""
    from tinykit.tokenizer.build import shrink_tokenizer, tokenizer_folder

    folder = tokenizer_folder(tok.folder)
    if folder is None and not text and not tok.foreign:
        return None
    try:
        return shrink_tokenizer(
            folder,
            out,
            vocab=spec.vocab,
            model_type=tok.model_type,
            exact=choices.exact_vocab,
            parts=parts,
        )
    except UnsupportedModelError:
        if folder is not None or choices.exact_vocab:
            raise
        return None  # a CTC head's character vocabulary (wav2vec2): no tokenizer class to train


def copy_real_tokenizer(tok: TokenizerSource, tmp: Path, parts: Parts, compose: bool) -> None:
    """Faithful mode ships the source's real tokenizer and chat template, byte for byte; a
    tiktoken rank file alone, or a composed tokenizer, also gets the tokenizer.json and
    tokenizer_config.json transformers loads, every id of the vocabulary kept."""
    from tinykit.tokenizer.build import replace_chat_template, write_tokenizer

    folder = _real_vocabulary_folder(tok)
    for source in dict.fromkeys(f for f in (folder, parts.tokens) if f is not None):
        replaced = TOKENS_FILES if parts.tokens not in (None, source) else ()
        for path in sorted(source.iterdir()):
            if _is_tokenizer_file(path, replaced):
                shutil.copyfile(path, tmp / path.name)
    _copy_nested_tiktoken(folder, tmp)
    if compose or not (tmp / "tokenizer.json").is_file():
        whole = dataclasses.replace(parts, template=None)
        write_tokenizer(folder, tmp, parts=whole, model_type=tok.model_type)
    if parts.template is not None:
        replace_chat_template(tmp, parts.template)


def _real_vocabulary_folder(tok: TokenizerSource) -> Path:
    """The source's folder, which faithful mode needs to hold a real vocabulary."""
    from tinykit.tokenizer.source import has_tokenizer_files

    if tok.folder is None:
        raise UsageError(
            f"--mode faithful keeps the source's real tokenizer, and {tok.name!r} (a bare "
            "model_type) has none. Use a folder or Hub id as the source (or --tokenizer), or "
            "--mode tiny."
        )
    if not has_tokenizer_files(tok.folder):
        raise UsageError(
            f"--mode faithful keeps the source's real vocabulary, and {tok.folder} has no "
            "vocabulary file (tokenizer.json, vocab files, a SentencePiece or tiktoken model). "
            "Pass --tokenizer SOURCE to take one from another source, or --mode tiny to train one."
        )
    return tok.folder


def _copy_nested_tiktoken(folder: Path, tmp: Path) -> None:
    """original/tokenizer.model and the like: copied where the Hub layout has them."""
    from tinykit.tokenizer import files as files_fmt

    for name in files_fmt.TIKTOKEN_NAMES:
        path = folder / name
        if "/" in name and path.is_file():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, tmp / name)


def _is_tokenizer_file(path: Path, replaced: Collection[str]) -> bool:
    """A file of the tokenizer's own (not weights or model files), unless `replaced`."""
    name = path.name
    return (
        path.is_file()
        and name not in NOT_TOKENIZER
        and name not in replaced
        and not name.lower().endswith(NOT_TOKENIZER_SUFFIXES)
    )


def _load(tmp: Path, name: str, config: dict[str, Any]) -> Any:
    """The written tokenizer as transformers loads it; a folder that does not load is an error.
    The source's config.json stands beside it meanwhile: AutoTokenizer reads its model_type when
    tokenizer_config.json names no class (save_pretrained replaces it later)."""
    from transformers import AutoTokenizer

    (tmp / "config.json").write_text(json.dumps(config))
    try:
        return AutoTokenizer.from_pretrained(tmp)
    except Exception as e:  # transformers raises many kinds on unusable files
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise UsageError(
            f"the tokenizer files of {name} do not load with AutoTokenizer "
            f"({type(e).__name__}: {first}), so nothing was written. Fix the files, or pass "
            "--tokenizer SOURCE or --mode tiny."
        ) from e
    finally:
        (tmp / "config.json").unlink()
