"""Which module changed numerically between two environments: run one command recorded in each
and diff the two dumps.

The environments are two versions of a package (cached overlays, `tinykit dumps versions` and
`bisect versions --record`) or two commits of a clone (`bisect commits --record`). The command
runs under `tinykit.numerics.attach.record_command` (no change to its code: every Python process
that runs a model is recorded), its exit code is kept (the bad end's command may well fail), and
`tinykit.diff_dumps` names the first divergence: an input, a parameter, or the first module
whose output differs while its inputs matched.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tinykit.bisect.envs import overlay
from tinykit.errors import BisectError, UsageError
from tinykit.numerics.attach import CommandRecording, record_command

__all__ = ["NumericsDiff", "compare_recordings", "diff_versions", "dumps_folder"]


@dataclass
class NumericsDiff:
    """Two recordings of one command and their diff. `equal` is None when they could not be
    compared (nothing recorded, different models): `first` says why."""

    old: str  # the two points: versions, or commits
    new: str
    dumps: list[str]
    exit_codes: list[int | None]
    equal: bool | None
    first: str  # the diff's headline: the first divergence, "no divergence", or why none
    root: dict[str, Any] | None = None  # the root record of the diff (module, kind, step...)
    diff: dict[str, Any] = field(default_factory=dict, repr=False)  # the whole DumpDiff

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        codes = ", ".join(
            f"{p}: exit {c}" for p, c in zip((self.old, self.new), self.exit_codes, strict=False)
        )
        lines = [
            f"recorded {self.old} -> {self.new} ({codes}): {self.first}",
            f"dumps: {' '.join(self.dumps)}",
        ]
        return "\n".join(lines)


def compare_recordings(
    old: str, a: CommandRecording, new: str, b: CommandRecording
) -> NumericsDiff:
    """Diff the dumps of the same command at two points (`a` is the reference)."""
    from tinykit.numerics.diff import diff_dumps

    dumps = [str(r.dumps[0]) if r.dumps else "" for r in (a, b)]
    codes = [a.exit_code, b.exit_code]
    result = NumericsDiff(old, new, dumps, codes, None, "")
    for point, rec in ((old, a), (new, b)):
        if not rec.dumps:
            last = (rec.tail.strip().splitlines() or ["no output"])[-1][:200]
            result.first = (
                f"nothing recorded at {point}: no process of the command ran a model (exit "
                f"{rec.exit_code}, last line: {last})"
            )
            return result
    if len(a.dumps) != len(b.dumps):
        result.first = (
            f"the command ran models in {len(a.dumps)} processes at {old} and "
            f"{len(b.dumps)} at {new}; compare the process dumps with tinykit dumps diff"
        )
        return result
    try:
        diff = diff_dumps(a.dumps[0], b.dumps[0])
    except UsageError as e:
        result.first = f"not comparable: {e}"
        return result
    result.equal = diff.equal
    result.first = diff.text().splitlines()[0]
    result.root = None if diff.root is None else asdict(diff.root)
    result.diff = diff.to_dict()
    return result


def diff_versions(
    package: str,
    old: str,
    new: str,
    cmd: Sequence[str],
    *,
    out: str | os.PathLike[str] | None = None,
    find_links: str | None = None,
    index_url: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    **options: Any,
) -> NumericsDiff:
    """Record `cmd` with `package` at `old` and at `new` (cached overlays over this
    environment) into `out`/<package>-<version> and diff the two recordings. `options` are
    `tinykit.record`'s (modules, what, steps, tensors, max_bytes, first_step).

    Raises:
        BisectError: a version does not install.
        UsageError: `out` exists and is not empty, or a bad record option.
    """
    if not cmd:
        raise BisectError("no command to record. Put it after --, e.g. -- python repro.py.")
    folder = dumps_folder(out, f"tinykit-{package}-")
    recordings = []
    for version in (old, new):
        env = overlay(
            package, version, find_links=find_links, index_url=index_url, cache_dir=cache_dir
        )
        if env.failed:
            raise BisectError(
                f"{package} {version} does not install here: {env.error}. Pick a release "
                "that installs (pip index versions NAME), or pass --find-links."
            )
        target = folder / f"{package}-{version}"
        recordings.append(
            record_command(
                cmd, target, env=env.environ(), cwd=cwd, timeout=timeout, capture=True, **options
            )
        )
    return compare_recordings(old, recordings[0], new, recordings[1])


def check_dumps_folder(out: str | os.PathLike[str] | None, record: bool = True) -> None:
    """Refuse, before a bisect starts, a dumps folder the recording after it could not use."""
    if out is None:
        return
    if not record:
        raise UsageError(f"--record-dir {out} is given without --record. Add --record, or drop it.")
    folder = Path(out)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise UsageError(f"'{folder}' exists and is not empty. Pass a new folder or remove it.")


def dumps_folder(out: str | os.PathLike[str] | None, prefix: str) -> Path:
    """The folder the two dumps go into: `out` (created; it must be new or empty), or a new
    temporary folder that is kept (its path is in the result)."""
    if out is None:
        return Path(tempfile.mkdtemp(prefix=prefix))
    check_dumps_folder(out)
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
