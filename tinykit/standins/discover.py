"""discover: run a test command against an empty loopback Hub, and draft the manifest it needs.

    result = discover(["pytest", "tests/test_x.py"], out="standins.toml")
    result.repos      # {("model", "org/name"): RepoRequests(files=[...], revisions=[...])}

The Hub answers every repo with 404 RepoNotFound at once (a suite fails fast, and nothing
waits on a timeout) and records each repo, revision and file asked for. The command runs with
HF_ENDPOINT pointing there, a fresh HF_HOME (no cache hit hides a request), and the offline
switches removed (some helpers contact the Hub even under HF_HUB_OFFLINE). Each model repo's
source is guessed from its name: a transformers class name in it (`tiny-random-
BertForSequenceClassification` -> class BertForSequenceClassification, model_type bert), else a
model_type (`tiny-random-gpt2` -> gpt2); a repo with neither, and every dataset, is written as a
commented TODO entry. A test that fails at its first 404 asks for nothing after it, so a
draft can miss a repo that is only fetched after another one loaded: build, rerun, compare.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tinykit._files import atomic_write
from tinykit._suggest import known_model_types, normalise
from tinykit.errors import UsageError

# environment switches that would keep a client from asking the loopback Hub
OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")
_PAIR = re.compile(r'\(\s*"([\w-]+)",\s*"(\w+)"\s*\)')


@dataclass
class RepoRequests:
    """What the command asked of one repo."""

    files: list[str] = field(default_factory=list)
    revisions: list[str] = field(default_factory=list)  # branches other than main


@dataclass
class Discovery:
    """The repos a command asked for, its exit code, and the draft manifest text."""

    command: list[str]
    returncode: int
    repos: dict[tuple[str, str], RepoRequests]
    manifest: str
    out: Path | None = None

    def to_dict(self) -> dict:
        return {
            "command": self.command,
            "returncode": self.returncode,
            "out": str(self.out) if self.out else None,
            "repos": [
                {"type": t, "id": r, "files": q.files, "revisions": q.revisions}
                for (t, r), q in self.repos.items()
            ],
        }


def discover(
    command: list[str],
    out: str | os.PathLike[str] | None = None,
    *,
    timeout: float | None = None,
) -> Discovery:
    """Run `command` against a recording, empty loopback Hub; write the draft manifest to `out`.

    The command's own exit code is reported, not raised: its tests fail on the 404s by design.
    Raises UsageError when the command cannot be started.
    """
    from tinykit.hub.server import HubServer

    if not command:
        raise UsageError("no command to run. Put it after --, e.g. -- pytest -x tests/.")
    with tempfile.TemporaryDirectory(prefix="tinykit-discover-") as tmp:
        (Path(tmp) / "root").mkdir()
        with HubServer(Path(tmp) / "root", read_only=True) as hub:
            env = {k: v for k, v in os.environ.items() if k not in OFFLINE_VARS}
            env.update(hub.client_env, HF_HOME=str(Path(tmp) / "hf-home"))
            env.pop("HF_TOKEN")  # read-only: nothing to push, and no write token to leak
            try:
                code = subprocess.run(command, env=env, timeout=timeout, check=False).returncode
            except FileNotFoundError as e:
                raise UsageError(
                    f"cannot run {command[0]!r}: {e.strerror}. Check the command after --."
                ) from e
            except subprocess.TimeoutExpired:
                code = 124  # what was asked for so far still makes a draft
            repos = requested_repos(hub.log.records)
    text = draft_manifest(repos, command)
    target = Path(out) if out is not None else None
    if target is not None:
        atomic_write(target, text)
    return Discovery(list(command), code, repos, text, target)


def requested_repos(records) -> dict[tuple[str, str], RepoRequests]:
    """Every repo named by a request, first spelling kept, with its files and branches."""
    repos: dict[tuple[str, str], RepoRequests] = {}
    spelled: dict[tuple[str, str], tuple[str, str]] = {}
    for r in records:
        if not r.repo_id or not r.repo_type:
            continue
        key = spelled.setdefault((r.repo_type, r.repo_id.lower()), (r.repo_type, r.repo_id))
        asked = repos.setdefault(key, RepoRequests())
        if r.filename and r.filename not in asked.files:
            asked.files.append(r.filename)
        rev = r.revision or "main"
        if rev != "main" and not re.fullmatch(r"[0-9a-f]{40}", rev) and rev not in asked.revisions:
            asked.revisions.append(rev)
    return repos


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


def draft_manifest(repos: dict[tuple[str, str], RepoRequests], command: list[str]) -> str:
    """The draft manifest of `repos`: a guessed entry per model, a TODO for the rest."""
    import shlex

    lines = [
        f"# Stand-ins asked for by: {_one_line(shlex.join(command))}",
        "# Drafted by `tinykit standins discover`: check every guess (class, mode, vocab), fill",
        "# in the TODO entries, then: tinykit standins build THIS.toml -o HUBDIR",
    ]
    for (repo_type, repo_id), asked in sorted(repos.items(), key=lambda kv: kv[0][1].lower()):
        section = "models" if repo_type == "model" else f"{repo_type}s"
        guess = guess_source(repo_id) if repo_type == "model" else None
        body = [f"{k} = {json.dumps(v)}" for k, v in (guess or {}).items()]
        if asked.revisions:
            body.append(f"revisions = {json.dumps(asked.revisions)}")
        lines.append("")
        if asked.files:
            lines.append(f"# asked for: {_one_line(', '.join(asked.files[:12]))}")
        if guess is None:
            why = "no model_type or class in its name" if repo_type == "model" else "a dataset"
            lines.append(f"# TODO ({why}): set source, then uncomment")
            lines.append(f'# [{section}."{repo_id}"]')
            lines.append('# source = "TODO"')
            lines += [f"# {line}" for line in body]
        else:
            lines.append(f'[{section}."{repo_id}"]')
            lines += body
    return "\n".join(lines) + "\n"


def _one_line(text: str, limit: int = 200) -> str:
    """`text` fit for a TOML comment: one line (a `-c` script has many), at most `limit` chars."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
