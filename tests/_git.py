"""Throwaway git clones for the bisect, fault-table and environment tests."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """Run git in `repo`; its stdout, stripped (a failing git fails the test)."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


def new_repo(repo: Path) -> Path:
    """An empty clone at `repo` (created) on branch main, with a committer set."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.invalid")
    git(repo, "config", "user.name", "t")
    return repo


def commit_all(repo: Path, message: str, tag: str | None = None) -> str:
    """Commit every change in `repo` (tagged `tag`, if given); the new commit's sha."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    if tag:
        git(repo, "tag", tag)
    return git(repo, "rev-parse", "HEAD")
