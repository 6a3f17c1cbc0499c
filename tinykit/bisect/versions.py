"""Bisect a regression across the *released* versions of one package, all else held fixed.

`bisect_versions("transformers", good="5.0.0", bad="5.3.0", cmd=["pytest", "-x", "t.py"])` lists
the releases between the ends, checks that the good end passes and the bad end fails, then
binary-searches the releases in between. Each step runs the command over a cached overlay holding
only that version of the package (see `tinykit.bisect.envs`). A step that cannot be tested (install
failure, exit 125, `skip_on`, timeout) or is flaky is set aside and its nearest neighbour is tried
instead, as `git bisect skip` does. Both ends get an environment capture and their diff.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from packaging.version import Version

from tinykit.bisect.envs import Overlay, overlay
from tinykit.bisect.recorded import check_dumps_folder
from tinykit.bisect.releases import list_releases, parse_version, sort_versions
from tinykit.bisect.result import BisectResult
from tinykit.bisect.steps import BAD, FLAKY, GOOD, SKIP, Step, command_text, run_step
from tinykit.errors import BisectError

__all__ = ["bisect_versions", "search"]


def search(points: Sequence[str], test: Callable[[str], str]) -> tuple[int, int, set[int]]:
    """Binary search for the first bad point; points[0] is known good and points[-1] known bad.

    Returns (last good index, first bad index, untestable indices). An untestable midpoint is set
    aside and the untested point nearest the middle is tried instead.
    """
    lo, hi, untestable = 0, len(points) - 1, set()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        choices = sorted(
            (i for i in range(lo + 1, hi) if i not in untestable), key=lambda i: (abs(i - mid), i)
        )
        if not choices:
            break
        i = choices[0]
        outcome = test(points[i])
        if outcome == GOOD:
            lo = i
        elif outcome == BAD:
            hi = i
        else:
            untestable.add(i)
    return lo, hi, untestable


def _capture_both(a: Overlay, b: Overlay) -> list[dict[str, Any]]:
    """`tinykit env capture` inside both ends' environments (in parallel: each imports torch),
    diffed. The overlay's own PATH/PYTHONPATH entries are the intended difference: left out."""
    from tinykit.repro.env import diff

    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / "a.json", Path(tmp) / "b.json"]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "tinykit", "env", "capture", "-o", str(path)],
                env=end.environ(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for end, path in zip((a, b), paths, strict=True)
        ]
        if any(p.wait() != 0 for p in procs) or not all(p.exists() for p in paths):
            return []
        entries = diff(*(json.loads(p.read_text()) for p in paths)).entries
    return [
        asdict(d)
        for d in entries
        if (d.section, d.key) not in (("env", "PATH"), ("env", "PYTHONPATH"))
    ]


def bisect_versions(
    package: str,
    good: str,
    bad: str,
    cmd: Sequence[str],
    *,
    versions: Sequence[str] | None = None,
    pre: bool = False,
    repeat: int = 1,
    timeout: float | None = None,
    skip_on: str | None = None,
    terms: tuple[str, str] = (GOOD, BAD),
    find_links: str | None = None,
    index_url: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cwd: str | None = None,
    capture_env: bool = True,
    log: Callable[[str], None] | None = None,
    record: bool = False,
    record_dir: str | os.PathLike[str] | None = None,
) -> BisectResult:
    """Find the first release of `package` where `cmd` goes from passing to failing.

    `record`: then run `cmd` recorded (`tinykit record`) at the last good and the first bad
    release, into `record_dir` (default: a new temporary folder, kept), and name the first
    divergence of the two dumps in `result.numerics`.
    """
    import time

    start = time.perf_counter()
    old, new = terms
    if not cmd:
        raise BisectError(
            "no command to run at each step. Put it after --, e.g. -- pytest -x t.py."
        )
    if repeat < 1:
        raise BisectError(f"--repeat must be at least 1, got {repeat}.")
    check_dumps_folder(record_dir, record)  # before the bisect, not after its minutes
    good, bad = str(good), str(bad)
    parse_version(good, f"--{GOOD}"), parse_version(bad, f"--{BAD}")
    if Version(good) == Version(bad):
        raise BisectError(
            f"the {old} and {new} ends are the same version {good}. Give two releases."
        )
    if Version(good) > Version(bad):
        raise BisectError(
            f"the {old} end {good} is newer than the {new} end {bad}. To find a fix, keep the "
            "older release first and use --term-old broken --term-new fixed."
        )
    known = sort_versions(versions) if versions else None
    if known is None:
        known = list_releases(package, pre=pre, find_links=find_links, index_url=index_url)
    for end in (good, bad):
        if not any(Version(v) == Version(end) for v in known):
            shown = ", ".join(known[-8:])
            raise BisectError(
                f"{package} {end} is not a known release (latest: {shown}). Pick one of those"
                + ("" if pre else ", or add --pre for pre-releases")
                + "."
            )
    points = [v for v in known if Version(good) <= Version(v) <= Version(bad)]
    if len(points) < 3:
        raise BisectError(
            f"no release of {package} between {good} and {bad}: {bad} is the first {new} one "
            "already; to go finer, bisect commits (tinykit bisect commits --from-versions)."
        )
    say = log or (lambda _msg: None)
    steps: list[Step] = []
    envs: dict[str, Overlay] = {}

    def test(version: str) -> str:
        env = overlay(
            package, version, find_links=find_links, index_url=index_url, cache_dir=cache_dir
        )
        envs[version] = env
        if env.failed:
            step = Step(
                version, SKIP, command_text(cmd), [], env.seconds, f"install failed: {env.error}"
            )
        else:
            step = run_step(
                version,
                cmd,
                env.environ(),
                repeat=repeat,
                cwd=cwd,
                timeout=timeout,
                skip_on=skip_on,
            )
            step.setup_seconds = env.seconds
            if env.cached:
                step.note = "base environment" if env.base else "cached environment"
        steps.append(step)
        shown = step.outcome.replace(GOOD, old).replace(BAD, new)
        say(f"{package} {version}: {shown} ({step.seconds:.1f}s)")
        return step.outcome

    for end, want in ((good, GOOD), (bad, BAD)):
        got = test(end)
        if got != want:
            step = steps[-1]
            if step.runs:
                last = (step.runs[-1].tail.strip().splitlines() or [""])[-1][:160]
                code = step.runs[-1].exit_code
                why = f"exit {code}" + (f", last line: {last}" if last else "")
            else:
                why = step.note
            expected = old if want == GOOD else new
            shown = got.replace(GOOD, old).replace(BAD, new)
            raise BisectError(
                f"the {expected} end {package} {end} is {shown}, not {expected} ({why}). Pick an "
                f"end where the command {'passes' if want == GOOD else 'fails'}, or fix the command."
            )
    lo, hi, untestable = search(points, test)
    undecided = [points[i] for i in sorted(untestable) if lo < i < hi]
    ends = envs[points[lo]], envs[points[hi]]  # both were tested: the ends are checked first
    env_diff = _capture_both(*ends) if capture_env and not any(e.failed for e in ends) else []
    numerics: dict[str, Any] = {}
    if record and not undecided:
        from tinykit.bisect.recorded import diff_versions

        say(f"recording {package} {points[lo]} and {points[hi]}")
        numerics = diff_versions(
            package,
            points[lo],
            points[hi],
            cmd,
            out=record_dir,
            find_links=find_links,
            index_url=index_url,
            cache_dir=cache_dir,
            cwd=cwd,
            timeout=timeout,
        ).to_dict()
    return BisectResult(
        noun="version",
        good=good,
        bad=bad,
        first_bad=points[hi],
        last_good=points[lo],
        undecided=undecided + [points[hi]] if undecided else [],
        skipped=sorted((s.point for s in steps if s.outcome not in (GOOD, BAD)), key=Version),
        steps=steps,
        flaky=sorted((s.point for s in steps if s.outcome == FLAKY), key=Version),
        terms=terms,
        seconds=time.perf_counter() - start,
        package=package,
        releases=points,
        env_diff=env_diff,
        numerics=numerics,
    )
