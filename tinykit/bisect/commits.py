"""Bisect a local git clone with `git bisect run` and a wrapper that installs each checkout.

The bisect runs in a throwaway `git worktree` (the clone's own checkout is never touched) and each
step installs into a private venv layered over this environment (a .pth line makes the base
packages visible), so the checkout is the only thing that changes. The wrapper
(`tinykit.bisect.commit_step`) maps outcomes to git's codes: 0 good, 1 bad, 125 skip (install or
import failure, exit 125, timeout); a package imported from outside the checkout, or any tinykit
failure, exits 255, which makes git abort the bisect instead of blaming a commit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tinykit._procs import run_command
from tinykit.bisect.recorded import check_dumps_folder
from tinykit.bisect.result import BisectResult
from tinykit.bisect.steps import BAD, GOOD, Run, Step
from tinykit.errors import BisectAborted, BisectError

__all__ = ["bisect_commits", "overlay_venv"]

DEFAULT_INSTALL = "python -m pip install --no-deps --no-build-isolation -e ."


def _git(repo: str | Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise BisectAborted(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip()[:200]}")
    return done.stdout.strip()


def _resolve(repo: str, rev: str, from_versions: bool) -> str:
    names = [f"v{rev}", rev] if from_versions else [rev]
    for name in names:
        sha = _git(repo, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", check=False)
        if sha:
            return sha
    tags = ", ".join(_git(repo, "tag", "--sort=-creatordate", check=False).splitlines()[:5])
    raise BisectError(
        f"{rev!r} is not a commit or tag of {repo}"
        + (
            f" (tried {' and '.join(names)}; latest tags: {tags or 'none'})"
            if from_versions
            else ""
        )
        + ". Give a sha, branch or tag (git -C REPO log --oneline)."
    )


def overlay_venv(folder: Path) -> Path:
    """A venv whose own installs shadow this environment's packages, which it still sees."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(folder)],
        check=True,
        capture_output=True,
    )
    python = folder / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # A .pth line appends the base venv's site-packages: pip, setuptools, torch come from there.
    base = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "_tinykit_base.pth").write_text("\n".join(sorted(base)) + "\n")
    return python


def bisect_commits(
    repo: str | os.PathLike[str],
    good: str,
    bad: str,
    cmd: Sequence[str],
    *,
    install: str | None = DEFAULT_INSTALL,
    package: str | None = None,
    from_versions: bool = False,
    timeout: float | None = None,
    skip_on: str | None = None,
    terms: tuple[str, str] = (GOOD, BAD),
    log: Callable[[str], None] | None = None,
    record: bool = False,
    record_dir: str | os.PathLike[str] | None = None,
) -> BisectResult:
    """Find the first commit between `good` and `bad` where `cmd` fails.

    `record`: then install and run `cmd` recorded (`tinykit record`) at the first bad commit's
    parent and at the first bad commit, into `record_dir` (default: a new temporary folder,
    kept), and name the first divergence of the two dumps in `result.numerics`.
    """
    start = time.perf_counter()
    repo = str(repo)
    if not cmd:
        raise BisectError(
            "no command to run at each step. Put it after --, e.g. -- pytest -x t.py."
        )
    check_dumps_folder(record_dir, record)  # before the bisect, not after its minutes
    if subprocess.run(
        ["git", "-C", repo, "rev-parse", "--git-dir"], capture_output=True
    ).returncode:
        raise BisectError(f"{repo} is not a git clone. Clone it first (git clone URL {repo}).")
    good_sha, bad_sha = _resolve(repo, good, from_versions), _resolve(repo, bad, from_versions)
    if good_sha == bad_sha:
        raise BisectError(
            f"the {terms[0]} and {terms[1]} ends are the same commit {good_sha[:10]}."
        )
    if subprocess.run(
        ["git", "-C", repo, "merge-base", "--is-ancestor", good_sha, bad_sha], capture_output=True
    ).returncode:
        raise BisectError(
            f"{good} is not an ancestor of {bad}: give the older commit as --good (to find a "
            "fix, use --term-old broken --term-new fixed)."
        )
    say = log or (lambda _msg: None)
    tmp = Path(tempfile.mkdtemp(prefix="tinykit-bisect-"))
    work, steps_log = tmp / "checkout", tmp / "steps.jsonl"
    try:
        _git(repo, "worktree", "add", "--detach", str(work), good_sha)
        python = overlay_venv(tmp / "venv")
        state = {
            "install": install,
            "package": package,
            "cmd": list(cmd),
            "timeout": timeout,
            "skip_on": skip_on,
            "log": str(steps_log),
            "venv": str(tmp / "venv"),
            "checkout": str(work),
        }
        (tmp / "state.json").write_text(json.dumps(state))
        step_cmd = [str(python), "-m", "tinykit.bisect.commit_step", str(tmp / "state.json")]
        env = {**os.environ, "PYTHONPATH": _tinykit_path()}
        # Both ends first: a failing good end is the user's mistake, not a bisect answer.
        for sha, want in ((good_sha, 0), (bad_sha, 1)):
            _git(work, "checkout", "--quiet", "--detach", sha)
            # its own process group, as every step's: Ctrl-C or SIGTERM ends the whole tree
            code = run_command(step_cmd, cwd=work, env=env).returncode
            entry = _entries(steps_log)[-1] if steps_log.exists() else {}
            say(f"{sha[:10]}: {entry.get('outcome', code)}")
            if code >= 128:
                raise BisectAborted(
                    f"the step wrapper failed at {sha[:10]}: {entry.get('note', '')}"
                )
            if code != want:
                name, other = (terms[0], "passes") if want == 0 else (terms[1], "fails")
                got = entry.get("outcome", str(code))
                raise BisectError(
                    f"the {name} end {sha[:10]} is {got}, not {name} ({entry.get('note') or 'exit ' + str(entry.get('exit_code'))}). "
                    f"Pick an end where the command {other}."
                )
        _git(
            work,
            "bisect",
            "start",
            f"--term-old={terms[0]}",
            f"--term-new={terms[1]}",
            bad_sha,
            good_sha,
        )
        done = run_command(
            ["git", "-C", str(work), "bisect", "run", *step_cmd], env=env, capture=True
        )
        bisect_log = _git(work, "bisect", "log", check=False)
        _git(work, "bisect", "reset", "--quiet", check=False)
        entries = _entries(steps_log) if steps_log.exists() else []
        for e in entries[2:]:
            say(f"{e['commit'][:10]}: {e['outcome']} {e['subject']}")
        out = done.output
        first = re.search(r"^([0-9a-f]{40}) is the first \S+ commit", out, re.M)
        # only skipped commits (timeouts, failed installs) left: git names the candidates and
        # stops with an error, which is an answer ("one of ..."), not an abort
        undecided = re.search(r"could be any of:\n((?:[0-9a-f]{40}\n)+)", out)
        candidates = undecided.group(1).split() if undecided and not first else []
        if done.returncode != 0 and not candidates:
            last = entries[-1].get("note", "") if entries else ""
            tail = " ".join(out.strip().splitlines()[-2:])[-200:]
            raise BisectAborted(
                f"git bisect run stopped: {last or tail or f'exit {done.returncode}'}. "
                "Run the step by hand in the clone to see why."
            )
        first_sha = first.group(1) if first else None
        numerics: dict[str, Any] = {}
        if record and first_sha:
            say(f"recording {first_sha[:10]}^ and {first_sha[:10]}")
            numerics = _record_ends(
                work, tmp / "venv", first_sha, cmd, install, timeout, record_dir
            )
        return BisectResult(
            noun="commit",
            good=good_sha,
            bad=bad_sha,
            first_bad=first_sha,
            last_good=None,  # git bisect run names the first bad commit only
            undecided=candidates,
            skipped=[e["commit"] for e in entries if e["outcome"] not in (GOOD, BAD)],
            steps=[_step(e) for e in entries],
            terms=terms,
            seconds=time.perf_counter() - start,
            repo=repo,
            subject=_git(repo, "log", "-1", "--format=%s", first_sha) if first_sha else "",
            log=bisect_log,
            numerics=numerics,
        )
    finally:
        subprocess.run(
            ["git", "-C", repo, "worktree", "remove", "--force", str(work)], capture_output=True
        )
        _git(repo, "worktree", "prune", check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def _record_ends(
    work: Path,
    venv: Path,
    first_bad: str,
    cmd: Sequence[str],
    install: str | None,
    timeout: float | None,
    record_dir: str | os.PathLike[str] | None,
) -> dict[str, Any]:
    """Install the first bad commit's parent, then the commit, in the bisect's checkout and venv,
    and record `cmd` at each (as the step wrapper runs it); the two dumps' first divergence."""
    from tinykit.bisect.recorded import compare_recordings, dumps_folder
    from tinykit.numerics.attach import record_command

    folder = dumps_folder(record_dir, "tinykit-commits-")
    env = {**os.environ, "PYTHONPATH": _tinykit_path(), "VIRTUAL_ENV": str(venv)}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    parent = _git(work, "rev-parse", f"{first_bad}^")
    recordings = []
    for sha in (parent, first_bad):
        _git(work, "checkout", "--quiet", "--detach", sha)
        if install:
            done = subprocess.run(install, shell=True, cwd=work, env=env, capture_output=True)
            if done.returncode != 0:
                raise BisectAborted(f"--record: the install of {sha[:10]} failed again")
        recordings.append(
            record_command(cmd, folder / sha[:10], env=env, cwd=work, timeout=timeout, capture=True)
        )
    return compare_recordings(parent, recordings[0], first_bad, recordings[1]).to_dict()


def _tinykit_path() -> str:
    """PYTHONPATH for the wrapper: this tinykit first, whatever the caller had after it."""
    here = str(Path(__file__).resolve().parents[2])
    old = os.environ.get("PYTHONPATH")
    return os.pathsep.join([here] + ([old] if old else []))


def _entries(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _step(entry: dict[str, Any]) -> Step:
    """A line of the step wrapper's log: one run (of the command, or of the install or import
    check that failed before it)."""
    run = Run(entry["exit_code"], entry["seconds"], entry["outcome"], entry.get("tail", ""))
    return Step(
        entry["commit"],
        entry["outcome"],
        entry.get("command", ""),
        [run],
        note=entry.get("note", ""),
        subject=entry["subject"],
    )
