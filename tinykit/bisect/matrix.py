"""Run one command under several versions of a package: a table of outcomes (markdown and JSON).

Each version runs in the same cached overlay a versions bisect uses, so a matrix after a bisect
(or before one) installs nothing twice.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from packaging.version import Version

from tinykit.bisect.envs import overlay
from tinykit.bisect.releases import list_releases, parse_version, sort_versions
from tinykit.bisect.steps import GOOD, SKIP, Step, command_text, run_step
from tinykit.errors import BisectError

__all__ = ["MatrixResult", "latest_patches", "run_matrix"]


def latest_patches(releases: Sequence[str], floor: str) -> list[str]:
    """The newest final release of each minor version from `floor` on, oldest first."""
    best: dict[tuple[int, int], Version] = {}
    lowest = parse_version(floor, "--since")
    for text in releases:
        v = Version(text)
        if v.is_prerelease or v < lowest:
            continue
        key = (v.major, v.minor)
        if key not in best or v > best[key]:
            best[key] = v
    return [str(best[k]) for k in sorted(best)]


@dataclass
class MatrixResult:
    package: str
    command: str
    steps: list[Step] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.outcome == GOOD for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def markdown(self) -> str:
        lines = [f"| {self.package} | outcome | exit | time |", "|---|---|---|---|"]
        for s in self.steps:
            codes = ",".join("-" if r.exit_code is None else str(r.exit_code) for r in s.runs)
            lines.append(f"| {s.point} | {s.outcome} | {codes or '-'} | {s.seconds:.1f}s |")
        return "\n".join(lines) + f"\n\ncommand: `{self.command}`"


def run_matrix(
    package: str,
    cmd: Sequence[str],
    *,
    versions: Sequence[str] | None = None,
    since: str | None = None,
    repeat: int = 1,
    timeout: float | None = None,
    skip_on: str | None = None,
    find_links: str | None = None,
    index_url: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> MatrixResult:
    """`cmd` under each of `versions` (or the latest patch of each minor since `since`)."""
    if not cmd:
        raise BisectError("no command to run per version. Put it after --, e.g. -- pytest -x t.py.")
    if not versions and not since:
        raise BisectError("give --versions a,b,c or --since FLOOR (latest patch of each minor).")
    if since:
        parse_version(str(since), "--since")  # before the index is asked
    if versions:
        chosen = sort_versions(versions)
    else:
        releases = list_releases(package, find_links=find_links, index_url=index_url)
        chosen = latest_patches(releases, str(since))
        if not chosen:
            raise BisectError(f"no release of {package} at or after {since}.")
    result = MatrixResult(package, command_text(cmd))
    for version in chosen:
        env = overlay(
            package, version, find_links=find_links, index_url=index_url, cache_dir=cache_dir
        )
        if env.failed:
            step = Step(
                version, SKIP, result.command, [], env.seconds, f"install failed: {env.error}"
            )
        else:
            step = run_step(
                version, cmd, env.environ(), repeat=repeat, timeout=timeout, skip_on=skip_on
            )
            step.setup_seconds = env.seconds
        result.steps.append(step)
    return result
