"""The draft manifest of `tinykit standins discover`: what each repo asked for becomes an entry.

    entries = draft_entries(repos, sources)     # {(type, id): DraftEntry}
    text = render(entries, repos, command)       # TOML, every inference with its reason

Each model repo gets, in order of trust: a local folder of the same name (`--sources DIR`),
a transformers class in its name (`tiny-random-BertForSequenceClassification` -> class
BertForSequenceClassification, model_type bert), a model_type in its name (`tiny-random-gpt2`),
else the default text model (`DEFAULT_SOURCE`, said so in a comment). Files the suite asked
for that the served stand-in lacked add the option that makes a build ship them
(`FILE_OPTIONS`: `modules.json` -> a sentence-transformers front end); files no tinykit build
makes are listed with the reason. A dataset or Space without a local folder of its name is a
commented TODO with its reason: requests do not show a dataset's columns.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tinykit._suggest import known_model_types, normalise
from tinykit.errors import UsageError

# the text model a repo whose name says nothing is drafted as
DEFAULT_SOURCE = "bert"
# a file the suite asked of a stand-in that lacked it -> (option, value, why), for a rebuild
FILE_OPTIONS = {
    "modules.json": (
        "pooling",
        "mean",
        "sentence-transformers loads it (asked modules.json); mean pooling is what "
        "sentence-transformers gives a model that has none",
    ),
}
# files transformers and huggingface_hub ask for on every load and do without (a 404 there is
# no finding): left out of the draft's "not built" notes
PROBED = frozenset(
    {
        "adapter_config.json",
        "added_tokens.json",
        "chat_template.jinja",
        "chat_template.json",
        "custom_generate/generate.py",
        "generation_config.json",
        "preprocessor_config.json",
        "processor_config.json",
        "special_tokens_map.json",
        "spiece.model",
        "tokenizer.model",
        "video_preprocessor_config.json",
        "vocab.txt",
    }
)
SECTIONS = {"model": "models", "dataset": "datasets", "space": "spaces"}
_TODO = {
    "dataset": "a dataset: requests do not show its columns; set features = {...} (synthetic "
    "rows, nulls = false for real-looking data) or source = a local copy, or pass --sources DIR "
    "with a folder of its name",
    "space": "a Space: tinykit builds models, tokenizers and datasets, not a Space's code; "
    "serve a folder with the files asked for from another loopback Hub, or list the tests "
    "that need it as known failures",
}
_PAIR = re.compile(r'\(\s*"([\w-]+)",\s*"(\w+)"\s*\)')


@dataclass
class RepoRequests:
    """What the command asked of one repo, over every pass."""

    files: list[str] = field(default_factory=list)
    revisions: list[str] = field(default_factory=list)  # branches other than main
    missing: list[str] = field(default_factory=list)  # asked of a served stand-in, not there


@dataclass
class DraftEntry:
    """One repo of the draft: its fields (None: a TODO), and why each was chosen."""

    repo_type: str
    repo_id: str
    fields: dict[str, object] | None
    notes: list[str] = field(default_factory=list)
    todo: str | None = None  # why it cannot be drafted

    @property
    def header(self) -> str:
        return f'[{SECTIONS[self.repo_type]}."{self.repo_id}"]'


def draft_entries(
    repos: dict[tuple[str, str], RepoRequests], sources: dict[str, Path] | None = None
) -> dict[tuple[str, str], DraftEntry]:
    """An entry per repo (see the module docstring); `sources` maps lower-cased `org/name` and
    `name` to local folders (`local_sources`)."""
    sources = sources or {}
    entries = {}
    for (repo_type, repo_id), asked in repos.items():
        entry = _draft(repo_type, repo_id, asked, sources)
        if asked.revisions and entry.fields is not None:
            entry.fields["revisions"] = list(asked.revisions)
        entries[(repo_type, repo_id)] = entry
    return entries


def _draft(
    repo_type: str, repo_id: str, asked: RepoRequests, sources: dict[str, Path]
) -> DraftEntry:
    local = sources.get(repo_id.lower()) or sources.get(repo_id.split("/")[-1].lower())
    if local is not None:
        entry = DraftEntry(repo_type, repo_id, {"source": str(local)})
        entry.notes.append(f"source: the local folder of the same name ({local})")
    elif repo_type != "model":
        return DraftEntry(repo_type, repo_id, None, todo=_TODO[repo_type])
    else:
        entry = _guessed_model(repo_id)
    if repo_type == "model" and entry.fields is not None:
        _add_file_options(entry, entry.fields, asked.missing)
    return entry


def _guessed_model(repo_id: str) -> DraftEntry:
    """A model's entry from its name (the default text model where it names none)."""
    guess = guess_source(repo_id)
    entry = DraftEntry("model", repo_id, dict(guess or {"source": DEFAULT_SOURCE}))
    if guess is None:
        entry.notes.append(
            f"source: no model_type or class in its name, so the default text model "
            f"({DEFAULT_SOURCE}); the suite's requests were answered by it"
        )
    return entry


def _add_file_options(entry: DraftEntry, fields: dict[str, object], missing: list[str]) -> None:
    """The options that build the front-end files the suite asked for and missed; a note of
    those tinykit does not build."""
    for name in missing:
        if name in FILE_OPTIONS:
            option, value, why = FILE_OPTIONS[name]
            fields.setdefault(option, value)
            entry.notes.append(f"{option}: {why}")
    unbuilt = [f for f in missing if f not in FILE_OPTIONS and f not in PROBED]
    if unbuilt:
        entry.notes.append(
            f"asked for, not built by tinykit: {', '.join(unbuilt[:8])} (the suite falls "
            "back without them, or those tests fail: list them as known failures)"
        )


def local_sources(folders: list[str | os.PathLike[str]]) -> dict[str, Path]:
    """`{"org/name" or "name" (lower-cased): folder}` of every repo folder (one holding a
    config.json, README.md or data) in `folders`, themselves or up to two levels down."""
    found: dict[str, Path] = {}
    for top in map(Path, folders):
        if not top.is_dir():
            raise UsageError(
                f"--sources {top}: no such folder. Pass folders holding local copies of repos."
            )
        candidates = [top, *top.glob("*"), *top.glob("*/*")]
        for folder in candidates:
            if folder.is_dir() and any(
                (folder / f).is_file() for f in ("config.json", "README.md", "modules.json")
            ):
                found.setdefault(folder.name.lower(), folder.resolve())
                found.setdefault(f"{folder.parent.name}/{folder.name}".lower(), folder.resolve())
    return found


def render(
    entries: dict[tuple[str, str], DraftEntry],
    repos: dict[tuple[str, str], RepoRequests],
    command: list[str],
) -> str:
    """The manifest text: drafted entries active, TODOs commented out, each with its reasons."""
    lines = [
        f"# Stand-ins asked for by: {_one_line(shlex.join(command))}",
        "# Drafted by `tinykit standins discover`: each inferred field says why above its entry;",
        "# fill in the TODO entries, then: tinykit standins build THIS.toml -o HUBDIR",
    ]
    for key, entry in sorted(entries.items(), key=lambda kv: kv[0][1].lower()):
        asked = repos[key]
        lines.append("")
        if asked.files:
            lines.append(f"# asked for: {_one_line(', '.join(asked.files[:12]))}")
        lines += [f"# {_one_line(note)}" for note in entry.notes]
        if entry.fields is None:
            lines.append(f"# TODO ({entry.todo}), then uncomment")
            lines.append(f"# {entry.header}")
            lines.append('# source = "TODO"')
            continue
        lines.append(entry.header)
        lines += [f"{k} = {json.dumps(v)}" for k, v in entry.fields.items()]
    return "\n".join(lines) + "\n"


@cache
def _class_types() -> dict[str, str]:
    """transformers class name -> model_type, read from its auto mappings' source text (the
    mappings module imports torch: ~25 s on a loaded machine, for a table of names)."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return {}
    auto = Path(next(iter(spec.submodule_search_locations))) / "models" / "auto"
    table: dict[str, list[str]] = {}
    for file in ("modeling_auto.py", "auto_mappings.py"):
        try:
            text = (auto / file).read_text()
        except OSError:
            continue
        for model_type, cls in _PAIR.findall(text):
            if (
                cls[0].isupper()
                and not cls.endswith("Config")
                and model_type not in table.setdefault(cls, [])
            ):
                table[cls].append(model_type)
    # several types share a class (gpt-sw3 uses GPT2LMHeadModel): the one the name starts with
    return {cls: _best_type(cls, types) for cls, types in table.items()}


def _best_type(cls: str, types: list[str]) -> str:
    squashed = cls.lower()
    prefixes = [t for t in types if squashed.startswith(re.sub(r"[-_]", "", t.lower()))]
    return max(prefixes, key=len) if prefixes else types[0]


def guess_source(repo_id: str) -> dict[str, str] | None:
    """{"source": model_type, "class": ...} from a repo's name, or None when it names neither."""
    parts = repo_id.split("/")[-1].split("-")
    classes = _class_types()
    for part in parts:
        if part in classes:
            return {"source": classes[part], "class": part}
    types = {normalise(t): t for t in known_model_types() or ()}
    for width in (2, 1):  # "deberta-v2" before "deberta"
        for i in range(len(parts) - width + 1):
            found = types.get(normalise("_".join(parts[i : i + width])))
            if found:
                return {"source": found}
    return None


def _one_line(text: str, limit: int = 200) -> str:
    """`text` fit for a TOML comment: one line (a `-c` script has many), at most `limit` chars."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
