"""What a bisect found, across the releases of a package or the commits of a clone: one result.

Both searches test points (a version, a commit) with the same steps and outcomes, so one class
holds the answer, renders the table the CLI prints and is the `--json` output. The fields only
one search fills (the searched releases and the ends' environment diff; the clone, the first bad
commit's subject and `git bisect log`) stay empty in the other. With `--record` both searches
also fill `numerics`: the command recorded at the last good and the first bad point, and the
first divergence of the two dumps (`tinykit.bisect.recorded.NumericsDiff`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from tinykit.bisect.steps import BAD, GOOD, Step

__all__ = ["BisectResult"]

_SHA = re.compile(r"[0-9a-f]{40}")


@dataclass
class BisectResult:
    """`found`: one first bad point; otherwise it is one of `undecided` (the points between
    could not be tested). `terms` are the names shown for good and bad."""

    noun: str  # what one step tests: "version" or "commit" (the table's first column)
    good: str  # the ends as tested (a commit as its full sha)
    bad: str
    first_bad: str | None
    last_good: str | None
    undecided: list[str]
    skipped: list[str]
    steps: list[Step] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    terms: tuple[str, str] = (GOOD, BAD)
    seconds: float = 0.0
    package: str = ""  # across releases: the package
    releases: list[str] = field(default_factory=list)  # across releases: good end to bad end
    env_diff: list[dict[str, Any]] = field(default_factory=list)  # the ends' environments
    repo: str = ""  # across commits: the clone
    subject: str = ""  # across commits: the first bad commit's subject line
    log: str = ""  # across commits: `git bisect log`
    numerics: dict[str, Any] = field(default_factory=dict)  # with --record: NumericsDiff

    @property
    def found(self) -> bool:
        return self.first_bad is not None and not self.undecided

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        lines = [*self._step_table(), self._answer(), *self._notes()]
        lines.append(f"{len(self.steps)} steps, {self.seconds:.1f}s")
        return "\n".join(lines)

    def _step_table(self) -> list[str]:
        """One row per tested point: its outcome, exit codes, time and subject (or command)."""
        old, new = self.terms
        shown = [_short(s.point) for s in self.steps]
        width = max([len(self.noun), *map(len, shown)])
        last = "subject" if any(s.subject for s in self.steps) else "command"
        lines = [f"{self.noun:<{width}} {'outcome':<8} {'exit':>5} {'time':>7}  {last}"]
        for point, s in zip(shown, self.steps, strict=True):
            codes = ",".join("-" if r.exit_code is None else str(r.exit_code) for r in s.runs)
            outcome = s.outcome.replace(GOOD, old).replace(BAD, new)
            lines.append(
                f"{point:<{width}} {outcome:<8} {codes or '-':>5} {s.seconds:6.1f}s  "
                f"{s.subject or s.command}"
            )
            if s.note:
                lines.append(f"{'':<{width}} {s.note}")
        return lines

    def _answer(self) -> str:
        """The first bad point, or the points it is one of."""
        old, new = self.terms
        since = f" (last {old}: {_short(self.last_good)})" if self.last_good else ""
        if self.found:
            answer = " ".join(x for x in (self.package, self.first_bad, self.subject) if x)
            return f"first {new} {self.noun}: {answer}{since}"
        return (
            f"undecided: the first {new} {self.noun} is one of "
            f"{', '.join(map(_short, self.undecided))}{since}; they could not be tested"
        )

    def _notes(self) -> list[str]:
        """The flaky and skipped points, how the ends' environments differ, their numerics."""
        lines = []
        if self.flaky:
            lines.append(f"flaky (passed and failed on repeat): {', '.join(self.flaky)}")
        if self.skipped:
            lines.append(f"skipped: {', '.join(map(_short, self.skipped))}")
        for d in self.env_diff[:12]:
            lines.append(f"env {d['section']}.{d['key']}: {d['a']} -> {d['b']}")
        return [*lines, *self._numerics_lines()]

    def _numerics_lines(self) -> list[str]:
        """With --record: the ends recorded and the first divergence of their dumps."""
        if not self.numerics:
            return []
        n = self.numerics
        points = f"{_short(n['old'])} -> {_short(n['new'])}"
        return [f"numerics {points}: {n['first']}", f"dumps: {' '.join(n['dumps'])}"]


def _short(point: str) -> str:
    """A commit sha as git shows it short; a version as it is."""
    return point[:10] if _SHA.fullmatch(point) else point
