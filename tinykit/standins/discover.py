"""discover: run a test command against a recording loopback Hub, and draft the manifest it needs.

    result = discover(["pytest", "tests/test_x.py"], out="standins.toml", sources=["../repos"])
    result.repos      # {("model", "org/name"): RepoRequests(files=[...], missing=[...])}

Pass 1: the Hub serves nothing and answers every repo with 404 RepoNotFound at once (a suite
fails fast, nothing waits on a timeout) and records each repo, revision and file asked for.
A test stops at its first 404, so pass 1 sees only the first repo of each test and none of
the files after config.json. Pass 2 serves a stand-in of every repo the draft can build
(`tinykit.standins.draft`): the suite goes on to ask for its tokenizer, processor and
front-end files, and for its second repos; a file asked of a stand-in that lacks it adds the
option that ships it (modules.json: a sentence-transformers front end). Passes repeat while
the draft changes, up to `passes`. Each pass runs the command with HF_ENDPOINT pointing there,
a fresh HF_HOME (no cache hit hides a request), and the offline switches removed (some helpers
contact the Hub even under HF_HUB_OFFLINE). Stand-ins are built through the artifact cache,
so the `standins build` of the draft afterwards finds most of them built.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinykit._files import atomic_write, check_output_file
from tinykit._progress import stage
from tinykit.errors import UsageError
from tinykit.standins.draft import (
    FILE_OPTIONS,
    DraftEntry,
    RepoRequests,
    draft_entries,
    guess_source,
    local_sources,
    render,
)

__all__ = ["Discovery", "RepoRequests", "discover", "draft_manifest", "guess_source"]

# environment switches that would keep a client from asking the loopback Hub
OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


@dataclass
class Discovery:
    """The repos a command asked for, its exit code per pass, and the draft manifest text."""

    command: list[str]
    returncode: int  # of the last pass
    repos: dict[tuple[str, str], RepoRequests]
    manifest: str
    out: Path | None = None
    passes: list[dict[str, Any]] = field(default_factory=list)  # per pass: exit code, repos

    def to_dict(self) -> dict:
        return {
            "command": self.command,
            "returncode": self.returncode,
            "out": str(self.out) if self.out else None,
            "passes": self.passes,
            "repos": [
                {
                    "type": t,
                    "id": r,
                    "files": q.files,
                    "revisions": q.revisions,
                    "missing": q.missing,
                }
                for (t, r), q in self.repos.items()
            ],
        }


def discover(
    command: list[str],
    out: str | os.PathLike[str] | None = None,
    *,
    timeout: float | None = None,
    sources: Collection[str | os.PathLike[str]] = (),
    passes: int = 3,
    cache_dir: str | os.PathLike[str] | None = None,
    force: bool = False,
) -> Discovery:
    """Run `command` against a recording loopback Hub, pass after pass (see the module
    docstring); write the draft manifest to `out`.

    Args:
        command: the test command (argv).
        out: where the draft goes (default: only returned); an existing file needs `force`.
        timeout: stop each pass after this many seconds (what was asked so far still counts):
            the command's whole process group is ended, as on Ctrl-C or SIGTERM.
        sources: folders holding local copies of repos, matched by name (`org/name` or `name`).
        passes: at most this many runs; 1 is the old empty-Hub pass alone.
        cache_dir: the artifact cache the stand-ins of later passes are built in.

    The command's own exit code is reported, not raised: its tests fail on the 404s by design.
    Raises UsageError when the command cannot be started or `out` cannot be written (checked
    before the first pass: a draft is never lost after the passes ran).
    """
    from tinykit.artifacts.cache import Cache

    if not command:
        raise UsageError("no command to run. Put it after --, e.g. -- pytest -x tests/.")
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise UsageError(f"passes={passes!r} must be a positive integer. Pass e.g. --passes 3.")
    target = None if out is None else check_output_file(out, force)
    located = local_sources(list(sources))
    repos: dict[tuple[str, str], RepoRequests] = {}
    entries: dict[tuple[str, str], DraftEntry] = {}
    report: list[dict[str, Any]] = []
    cache = Cache(cache_dir)
    with tempfile.TemporaryDirectory(prefix="tinykit-discover-") as tmp:
        for n in range(1, passes + 1):
            stage(f"discover pass {n}: serving {len(_buildable(entries))} stand-in(s)")
            code, served = _run_pass(
                command, Path(tmp) / f"pass{n}", entries, repos, cache, timeout
            )
            report.append({"pass": n, "returncode": code, "served": served, "repos": len(repos)})
            drafted = draft_entries(repos, located)
            if n > 1 and _same(drafted, entries):
                break
            entries = drafted
    text = render(entries, repos, command)
    if target is not None:
        atomic_write(target, text)
    return Discovery(list(command), code, repos, text, target, report)


def draft_manifest(repos: dict[tuple[str, str], RepoRequests], command: list[str]) -> str:
    """The draft of `repos` from their names and requests alone (no local sources)."""
    return render(draft_entries(repos), repos, command)


def _same(a: dict[tuple[str, str], DraftEntry], b: dict[tuple[str, str], DraftEntry]) -> bool:
    return {k: e.fields for k, e in a.items()} == {k: e.fields for k, e in b.items()}


def _buildable(entries: dict[tuple[str, str], DraftEntry]) -> dict[str, Any]:
    """The drafted entries as a parsed-manifest dict (TODOs and Spaces left out)."""
    data: dict[str, Any] = {}
    for (repo_type, repo_id), entry in entries.items():
        if entry.fields is not None and repo_type in ("model", "dataset"):
            section = data.setdefault(f"{repo_type}s", {})
            section[repo_id] = {k: v for k, v in entry.fields.items() if k != "revisions"}
    return data


def _run_pass(
    command: list[str],
    work: Path,
    entries: dict[tuple[str, str], DraftEntry],
    repos: dict[tuple[str, str], RepoRequests],
    cache: Any,
    timeout: float | None,
) -> tuple[int, int]:
    """Serve the buildable drafted entries, run the command once, merge what it asked into
    `repos`. Returns (its exit code, how many repos were served)."""
    from tinykit._procs import TIMED_OUT, run_command
    from tinykit.hub.server import HubServer
    from tinykit.standins.build import built_entries
    from tinykit.standins.manifest import parse_manifest

    (work / "root").mkdir(parents=True)
    served: set[tuple[str, str]] = set()
    with HubServer(work / "root", read_only=True) as hub:
        data = _buildable(entries)
        failures: list[str] = []
        if data:
            for entry, _, folder, _, _ in built_entries(parse_manifest(data), cache, failures):
                hub.store.mount(entry.repo_type, entry.repo_id, folder)
                served.add((entry.repo_type, entry.repo_id.lower()))
        for line in failures:  # a guess that does not build: its tests stop at the 404
            stage(f"discover: not served: {line}")
        env = {k: v for k, v in os.environ.items() if k not in OFFLINE_VARS}
        env.update(hub.client_env, HF_HOME=str(work / "hf-home"))
        env.pop("HF_TOKEN")  # read-only: nothing to push, and no write token to leak
        try:  # its own process group: a timeout or Ctrl-C ends all it started
            code = run_command(command, env=env, timeout=timeout).returncode
        except (FileNotFoundError, PermissionError) as e:
            raise UsageError(
                f"cannot run {command[0]!r}: {e.strerror}. Check the command after --."
            ) from e
        if code == TIMED_OUT:
            stage(f"discover: the command ran past --timeout {timeout:g} s and was stopped")
        merge_requests(repos, hub.log.records, served)
    return code, len(served)


def merge_requests(
    repos: dict[tuple[str, str], RepoRequests],
    records: Any,
    served: Collection[tuple[str, str]] = (),
) -> None:
    """Add every repo named by a request to `repos` (first spelling kept) with its files and
    branches; for a repo in `served`, its `missing` files become this pass's 404s."""
    spelled = {(t, r.lower()): (t, r) for t, r in repos}
    missing: dict[tuple[str, str], list[str]] = {}
    for r in records:
        if not r.repo_id or not r.repo_type:
            continue
        key = spelled.setdefault((r.repo_type, r.repo_id.lower()), (r.repo_type, r.repo_id))
        asked = repos.setdefault(key, RepoRequests())
        if r.filename:
            _add_once(asked.files, r.filename)
            if r.status == 404 and (r.repo_type, r.repo_id.lower()) in served:
                _add_once(missing.setdefault(key, []), r.filename)
        rev = r.revision or "main"
        if _is_branch(rev):
            _add_once(asked.revisions, rev)
    _renew_missing(repos, missing, served)


def _add_once(items: list[str], item: str) -> None:
    if item not in items:
        items.append(item)


def _is_branch(rev: str) -> bool:
    """A revision other than `main` that is not a commit hash."""
    return rev != "main" and not re.fullmatch(r"[0-9a-f]{40}", rev)


def _renew_missing(
    repos: dict[tuple[str, str], RepoRequests],
    missing: dict[tuple[str, str], list[str]],
    served: Collection[tuple[str, str]],
) -> None:
    """For each repo in `served`, its `missing` files become this pass's 404s."""
    for key, asked in repos.items():
        if (key[0], key[1].lower()) in served:
            # a front-end file once missing keeps its option: it is there now because of it
            kept = [f for f in asked.missing if f in FILE_OPTIONS]
            asked.missing = kept + [f for f in missing.get(key, []) if f not in kept]


def requested_repos(records) -> dict[tuple[str, str], RepoRequests]:
    """Every repo named by a request, first spelling kept, with its files and branches."""
    repos: dict[tuple[str, str], RepoRequests] = {}
    merge_requests(repos, records)
    return repos
