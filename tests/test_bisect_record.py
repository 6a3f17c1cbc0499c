"""Across versions in one command: `bisect versions --record`, `dumps versions`, `bisect commits
--record`, on a small torch package (`tknum`) whose `Block.act` changes numerics in one release.

The predicate is a user's script (`_wheels.NUMERICS_CHECK`): two SGD steps of the package's model,
failing when the loss moves away from the one the good release gave. Each recording runs that
script unchanged under `tinykit record` in the release's cached overlay (local wheels,
`--find-links`), so what is diffed is what the user's command ran.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _git import commit_all, git, new_repo
from _wheels import NUMERICS_CHECK, numerics_wheels

from tinykit.bisect.commits import bisect_commits
from tinykit.bisect.envs import overlay
from tinykit.bisect.recorded import diff_versions
from tinykit.cli import main

VERSIONS = ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5"]
CHANGED_IN = "1.3"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(wheel folder, overlay cache, the predicate script and its golden loss from 1.0)."""
    root = tmp_path_factory.mktemp("tknum")
    wheels, cache = root / "wheels", root / "envs"
    numerics_wheels(wheels, VERSIONS, changed_in=CHANGED_IN)
    script, golden = root / "check.py", root / "golden.txt"
    script.write_text(NUMERICS_CHECK)
    good = overlay("tknum", "1.0", find_links=str(wheels), cache_dir=cache)
    subprocess.run(
        [sys.executable, str(script), str(golden)], env=good.environ(), check=True, timeout=300
    )
    return wheels, cache, script, golden


def test_bisect_versions_record_names_the_release_and_the_module(setup, tmp_path, capsys):
    wheels, cache, script, golden = setup
    argv = ["bisect", "versions", "tknum", "--good", "1.0", "--bad", "1.5"]
    argv += ["--find-links", str(wheels), "--cache-dir", str(cache), "--no-env-capture"]
    argv += ["--record", "--record-dir", str(tmp_path / "dumps"), "--json"]
    assert main([*argv, "--", sys.executable, str(script), str(golden)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["last_good"], result["first_bad"]) == ("1.2", CHANGED_IN)
    numerics = result["numerics"]
    assert (numerics["old"], numerics["new"], numerics["equal"]) == ("1.2", "1.3", False)
    assert numerics["exit_codes"] == [0, 1]  # the bad release's run fails, and is recorded
    root = numerics["root"]
    assert (root["module"], root["kind"], root["step"]) == ("block.act", "forward", 0)
    assert numerics["first"].startswith("first divergence: 'block.act' (Gelu, forward call 0")
    assert sorted(p.name for p in (tmp_path / "dumps").iterdir()) == ["tknum-1.2", "tknum-1.3"]


def test_dumps_versions_equal_and_different_releases(setup, tmp_path, capsys):
    wheels, cache, script, golden = setup
    cmd = ["--", sys.executable, str(script), str(golden)]
    common = ["--find-links", str(wheels), "--cache-dir", str(cache)]
    assert (
        main(
            [
                "dumps",
                "versions",
                "tknum",
                "1.0",
                "1.2",
                *common,
                "-o",
                str(tmp_path / "same"),
                *cmd,
            ]
        )
        == 0
    )
    assert "no divergence" in capsys.readouterr().out
    assert main(["dumps", "versions", "tknum", "1.2", "1.4", *common, *cmd]) == 1
    out = capsys.readouterr().out
    assert out.startswith(
        "recorded 1.2 -> 1.4 (1.2: exit 0, 1.4: exit 1): first divergence: 'block.act'"
    )
    # the API: a command that runs no model records nothing, and says so
    nothing = diff_versions(
        "tknum", "1.0", "1.4", ["python -c 'import tknum'"], find_links=str(wheels), cache_dir=cache
    )
    assert nothing.equal is None and nothing.first.startswith("nothing recorded at 1.0")
    assert main(["dumps", "versions", "tknum", "1.0", "9.9", *common, *cmd]) == 2
    assert "tknum 9.9 does not install here" in capsys.readouterr().err


PYPROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "tknum"
version = "0.{i}"
"""


def test_bisect_commits_record_names_the_module(setup, tmp_path):
    """A clone whose commit 3 switches the activation: the commit, and the module, named."""
    from _wheels import _NUMERICS_SOURCE

    _, _, script, golden = setup
    repo = new_repo(tmp_path / "tknum-repo")
    (repo / "tknum").mkdir()
    for i in range(5):
        approximate = "tanh" if i >= 3 else "none"
        (repo / "pyproject.toml").write_text(PYPROJECT.format(i=i))
        source = _NUMERICS_SOURCE.format(version=f"0.{i}", approximate=approximate)
        (repo / "tknum" / "__init__.py").write_text(source)
        commit_all(repo, f"commit {i}" + (": tanh GELU" if i == 3 else ""))
    first, last = git(repo, "rev-list", "--max-parents=0", "HEAD"), git(repo, "rev-parse", "HEAD")
    result = bisect_commits(
        repo,
        first,
        last,
        ["python", str(script), str(golden)],  # the private venv's python, which has the clone
        package="tknum",
        record=True,
        record_dir=tmp_path / "dumps",
    )
    assert result.subject == "commit 3: tanh GELU"
    numerics = result.numerics
    assert numerics["new"] == result.first_bad and numerics["old"] == git(
        repo, "rev-parse", "HEAD~2"
    )
    assert numerics["root"]["module"] == "block.act" and numerics["equal"] is False
    assert f"numerics {numerics['old'][:10]} -> {result.first_bad[:10]}: first divergence" in (
        result.render()
    )
