"""The tokenizer a tiny model ships: shrunk (tiny mode) or the real one (faithful mode), from the
config's source or another (`--tokenizer SOURCE`), with its chat template optionally replaced.

Faithful mode reads the layouts tiny mode reads: tokenizer.json, vocab files, SentencePiece
models, and a Llama-3 tiktoken `original/tokenizer.model` alone (converted to a full
tokenizer.json, ids unchanged). A folder it cannot make a loading tokenizer of is an error,
never a model shipped without one.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tinykit._files import sha256_file
from tinykit.errors import TinyArtifactInvalid, UnsupportedModelError, UsageError
from tinykit.hub.layout import SHARD_INDEX_SUFFIX, WEIGHT_SUFFIXES

if TYPE_CHECKING:
    from tinykit.model.choices import BuildChoices
    from tinykit.model.spec import ShrinkSpec
    from tinykit.source import Source

PROCESSOR_FILES = (
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
)
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
TEMPLATE_FILES = ("chat_template.json", "chat_template.jinja")


@dataclass(frozen=True)
class TokenizerSource:
    """Where the tokenizer comes from: the config's source, or the one --tokenizer names."""

    folder: Path | None
    model_type: str | None
    name: str
    origin: str  # Source.origin: "folder", "model_type" or "hub"
    revision: str | None
    foreign: bool


@dataclass(frozen=True)
class Shipped:
    """What was written: the tokenizer's length, the source->tiny special-id map (tiny mode,
    own source), a foreign tokenizer's special ids, and provenance of the choices."""

    vocab_size: int | None = None
    id_map: dict[int, int] | None = None
    special_ids: dict[str, int] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)


def tokenizer_source(src: Source, choice: str | None, trust_remote_code: bool) -> TokenizerSource:
    """The config's source, or `choice` (a folder, with or without config.json; a Hub id; a
    model_type) resolved as make-tiny resolves a source."""
    from tinykit.source import folder_digest, resolve

    if choice is None:
        return TokenizerSource(
            src.folder, src.model_type, src.name, src.origin, src.revision, foreign=False
        )
    path = Path(choice).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():  # a tokenizer folder alone
        return TokenizerSource(path, None, choice, "folder", folder_digest(path), foreign=True)
    other = resolve(choice, None, trust_remote_code)
    return TokenizerSource(
        other.folder, other.model_type, choice, other.origin, other.revision, foreign=True
    )


def ship(
    tmp: Path,
    src: Source,
    spec: ShrinkSpec,
    choices: BuildChoices,
    takes_text: bool,
    trust_remote_code: bool = False,
) -> Shipped:
    """Write the tokenizer files into `tmp` (none for a model without text input)."""
    tok = tokenizer_source(src, choices.tokenizer, trust_remote_code)
    record: dict[str, Any] = {}
    if tok.foreign:
        record["tokenizer_source"] = {
            "name": tok.name,
            "kind": tok.origin,
            "revision": tok.revision,
        }
    if spec.mode == "tiny":
        tiny = _shrink(tok, spec, choices, tmp, takes_text)
        if tiny is None:
            if choices.exact_vocab or choices.chat_template or tok.foreign:
                raise UsageError(
                    f"{src.name} takes no text, so no tokenizer is built and --exact-vocab, "
                    "--chat-template and --tokenizer do not apply. Drop them."
                )
            return Shipped()
        vocab_size, id_map = tiny.vocab_size, None if tok.foreign else tiny.id_map
    else:
        copy_real_tokenizer(tok, tmp)
        vocab_size, id_map = None, None
    if choices.chat_template:
        record["chat_template_sha256"] = replace_chat_template(tmp, Path(choices.chat_template))
    if vocab_size is not None and not tok.foreign and not choices.chat_template:
        return Shipped(vocab_size, id_map, {}, record)  # a tiny tokenizer checked as it was built
    loaded = _load(tmp, tok.name, src.config)
    if choices.chat_template and loaded.chat_template != Path(choices.chat_template).read_text():
        raise TinyArtifactInvalid(
            f"the tokenizer in the build does not load --chat-template {choices.chat_template} as its "
            "template. This is a tinykit bug: report it with the tokenizer source."
        )
    special = {k: v for k in SPECIAL_IDS if isinstance(v := getattr(loaded, k, None), int)}
    return Shipped(
        vocab_size=vocab_size if vocab_size is not None else len(loaded),
        id_map=id_map,
        special_ids=special if tok.foreign else {},
        record=record,
    )


def _shrink(tok: TokenizerSource, spec: ShrinkSpec, choices: BuildChoices, out: Path, text: bool):
    """Tiny mode: the source's tokenizer shrunk, or one trained for the architecture (a bare
    model_type, or a folder without vocabulary files). Models without text input get none."""
    from tinykit.tokenizer.build import shrink_tokenizer, tokenizer_folder

    folder = tokenizer_folder(tok.folder)
    if folder is None and not text and not tok.foreign:
        return None
    exact = choices.exact_vocab
    try:
        return shrink_tokenizer(
            folder, out, vocab=spec.vocab, model_type=tok.model_type, exact=exact
        )
    except UnsupportedModelError:
        if folder is not None or exact:
            raise
        return None  # a CTC head's character vocabulary (wav2vec2): no tokenizer class to train
    except TinyArtifactInvalid:
        if folder is not None:
            raise
    # A tokenizer trained for the architecture's own class failed its round-trip check (some
    # classes normalise text): a byte-fallback BPE of the Llama layout always round-trips.
    return shrink_tokenizer(None, out, vocab=spec.vocab, model_type="llama", exact=exact)


def copy_real_tokenizer(tok: TokenizerSource, tmp: Path) -> None:
    """Faithful mode ships the source's real tokenizer and chat template, byte for byte; a
    tiktoken rank file alone also gets the tokenizer.json transformers loads."""
    from tinykit.tokenizer import files as files_fmt
    from tinykit.tokenizer.source import has_tokenizer_files

    if tok.folder is None:
        raise UsageError(
            f"--mode faithful keeps the source's real tokenizer, and {tok.name!r} (a bare model_type) "
            f"has none. Use a folder or Hub id as the source (or --tokenizer), or --mode tiny."
        )
    if not has_tokenizer_files(tok.folder):
        raise UsageError(
            f"--mode faithful keeps the source's real tokenizer, and {tok.folder} has no tokenizer "
            "files (tokenizer.json, vocab files or a SentencePiece model). Add them, pass "
            "--tokenizer SOURCE, or use --mode tiny, which trains a tiny tokenizer."
        )
    for path in sorted(tok.folder.iterdir()):
        if (
            path.is_file()
            and path.name not in NOT_TOKENIZER
            and not path.name.lower().endswith(NOT_TOKENIZER_SUFFIXES)
        ):
            shutil.copyfile(path, tmp / path.name)
    for name in files_fmt.TIKTOKEN_NAMES:
        path = tok.folder / name
        if "/" in name and path.is_file():  # original/tokenizer.model: keep the Hub layout
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, tmp / name)
    if not (tmp / "tokenizer.json").is_file():
        _tiktoken_json(tok.folder, tmp)


def _tiktoken_json(folder: Path, tmp: Path) -> None:
    """A full tokenizer.json (every rank, ids unchanged, declared special tokens added) for a
    folder whose vocabulary is a tiktoken rank file only."""
    from tokenizers import Tokenizer

    from tinykit.tokenizer.files import TIKTOKEN_NAMES, read_tiktoken
    from tinykit.tokenizer.source import read_source

    if not any(read_tiktoken(folder / n) for n in TIKTOKEN_NAMES if (folder / n).is_file()):
        return  # vocab files or a SentencePiece model: transformers converts those itself
    source = read_source(folder, 10**7, None, "auto")  # a limit above any real vocab: keep all
    Tokenizer.from_str(json.dumps(source.tj)).save(str(tmp / "tokenizer.json"), pretty=False)


def replace_chat_template(tmp: Path, template: Path) -> str:
    """Make `template`'s text the tokenizer's only chat template; return its sha256."""
    try:
        text = template.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(
            f"--chat-template {template} cannot be read: {e}. Pass a UTF-8 Jinja file."
        ) from e
    if not text.strip():
        raise UsageError(f"--chat-template {template} is empty. Pass a Jinja chat template file.")
    config_path = tmp / "tokenizer_config.json"
    config = json.loads(config_path.read_text("utf-8")) if config_path.is_file() else {}
    if "chat_template" in config:  # transformers would read it beside the .jinja file
        del config["chat_template"]
        config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", "utf-8")
    for name in TEMPLATE_FILES:
        (tmp / name).unlink(missing_ok=True)
    (tmp / "chat_template.jinja").write_text(text, "utf-8")
    return sha256_file(template)


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
