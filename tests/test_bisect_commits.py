"""`tinykit bisect commits` on a local 64-commit repo: broken from commit 41, unbuildable at 20."""

from __future__ import annotations

import pytest
from _git import commit_all, git, new_repo

from tinykit.bisect.commits import bisect_commits
from tinykit.cli import main
from tinykit.errors import BisectAborted, BisectError

PYPROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "tkrepo"
version = "0.{i}"
"""
CHECK = "python -c 'import tkrepo, sys; sys.exit(tkrepo.VALUE)'"


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """Commits 0..63; VALUE is 1 (the bug) from commit 41 on; commit 20's pyproject is broken."""
    repo = new_repo(tmp_path_factory.mktemp("tkrepo"))
    (repo / "tkrepo").mkdir()
    for i in range(64):
        (repo / "pyproject.toml").write_text(PYPROJECT.format(i=i) + ("[[" if i == 20 else ""))
        (repo / "tkrepo" / "__init__.py").write_text(f"COMMIT = {i}\nVALUE = {int(i >= 41)}\n")
        commit_all(repo, f"commit {i}", tag=f"v0.{i}")
    return repo


def sha(repo, i):
    return git(repo, "rev-parse", f"v0.{i}")


def test_first_bad_commit_with_the_unbuildable_one_skipped(repo):
    # Ends 0 and 41 put commit 20 first on git's path; the whole 64-commit range is in the CLI test.
    result = bisect_commits(repo, sha(repo, 0), sha(repo, 41), [CHECK], package="tkrepo")
    assert result.found and result.first_bad == sha(repo, 41)
    assert result.subject == "commit 41"
    assert result.skipped == [sha(repo, 20)]
    assert all(
        s.note == "tkrepo from tkrepo/__init__.py" and s.runs[0].exit_code == (s.outcome == "bad")
        for s in result.steps
        if s.outcome in ("good", "bad")
    )
    assert result.steps[0].point == sha(repo, 0) and result.steps[0].subject == "commit 0"
    table = result.render()
    assert table.startswith("commit     outcome") and f"{sha(repo, 20)[:10]} skip" in table
    assert git(repo, "status", "--porcelain") == ""  # the clone's checkout is untouched
    assert git(repo, "worktree", "list").count("\n") == 0


def test_cli_over_all_64_commits_from_versions(repo, capsys):
    argv = ["bisect", "commits", "--repo", str(repo), "--good", "0.0", "--bad", "0.63"]
    assert main([*argv, "--from-versions", "--package", "tkrepo", "--", CHECK]) == 0
    out = capsys.readouterr().out
    assert f"first bad commit: {sha(repo, 41)} commit 41" in out


def test_a_package_imported_from_elsewhere_aborts(repo):
    # No install: tkrepo is not importable from the checkout's venv... unless it is; `json` is
    # importable but lives outside the checkout, which must abort rather than blame a commit.
    with pytest.raises(BisectAborted, match="json imports from .* not from the checkout"):
        bisect_commits(repo, sha(repo, 0), sha(repo, 63), [CHECK], install=None, package="json")


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("v0.5", "v0.5", "are the same commit"),
        ("v0.9", "v0.3", "is not an ancestor of"),
        ("nope", "v0.3", "'nope' is not a commit or tag"),
        ("v0.42", "v0.63", "the good end .* is bad, not good"),
    ],
)
def test_bad_ends_are_usage_errors(repo, good, bad, message):
    with pytest.raises(BisectError, match=message):
        bisect_commits(repo, good, bad, [CHECK], install=None)


def test_not_a_clone_is_exit_2(tmp_path, capsys):
    assert (
        main(
            [
                "bisect",
                "commits",
                "--repo",
                str(tmp_path),
                "--good",
                "a",
                "--bad",
                "b",
                "--",
                "true",
            ]
        )
        == 2
    )
    assert "is not a git clone" in capsys.readouterr().err
