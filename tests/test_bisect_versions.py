"""`tinykit bisect versions` over a local wheel folder: tkdemo 1.0 ... 1.9, broken from 1.6, flaky at 1.3."""

from __future__ import annotations

import pytest
from _wheels import regression_wheels

from tinykit.bisect.versions import bisect_versions, search
from tinykit.cli import main

VERSIONS = [f"1.{i}" for i in range(10)]
CHECK = "python -c 'import tkdemo, sys; sys.exit(tkdemo.check())'"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wheels")
    regression_wheels(folder, VERSIONS, first_bad="1.6", flaky=("1.3",))
    return folder


@pytest.fixture(scope="module")
def env_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("bisect-envs")


@pytest.fixture(autouse=True)
def _counter(tmp_path, monkeypatch):
    monkeypatch.setenv("TKDEMO_COUNTER", str(tmp_path / "counter"))


def test_first_bad_release_and_env_diff_of_the_ends(wheels, env_cache):
    result = bisect_versions(
        "tkdemo", "1.0", "1.9", [CHECK], repeat=2, find_links=str(wheels), cache_dir=env_cache
    )
    assert (result.first_bad, result.last_good, result.found) == ("1.6", "1.5", True)
    assert [s.point for s in result.steps] == ["1.0", "1.9", "1.4", "1.6", "1.5"]
    assert all(r.exit_code == (s.outcome == "bad") for s in result.steps for r in s.runs)
    assert {"section": "packages", "key": "tkdemo", "a": "1.5", "b": "1.6"} in result.env_diff
    assert "first bad version: tkdemo 1.6 (last good: 1.5)" in result.render()


def test_flaky_release_is_reported_not_guessed(wheels, env_cache):
    # Ending at 1.7 puts 1.3 on the search path; it fails every other run.
    result = bisect_versions(
        "tkdemo",
        "1.0",
        "1.7",
        [CHECK],
        repeat=2,
        find_links=str(wheels),
        cache_dir=env_cache,
        capture_env=False,
    )
    assert result.first_bad == "1.6" and result.found
    assert result.flaky == ["1.3"]
    assert [r.exit_code for r in next(s for s in result.steps if s.point == "1.3").runs] == [0, 1]
    # Without --repeat the flaky release passes its single run and the answer is still right,
    # and environments built by the first bisect are reused.
    again = bisect_versions(
        "tkdemo",
        "1.0",
        "1.7",
        [CHECK],
        find_links=str(wheels),
        cache_dir=env_cache,
        capture_env=False,
    )
    assert again.first_bad == "1.6"
    assert all(s.note == "cached environment" for s in again.steps if s.point in ("1.0", "1.4"))


def test_an_uninstallable_release_is_skipped(tmp_path, wheels, env_cache):
    # --versions names a release the wheel folder lacks: its install fails, the neighbour is tried.
    result = bisect_versions(
        "tkdemo",
        "1.0",
        "1.9",
        [CHECK],
        versions=[*VERSIONS[:5], "1.4.5", *VERSIONS[5:]],
        find_links=str(wheels),
        cache_dir=env_cache,
        capture_env=False,
    )
    assert result.first_bad == "1.6"
    assert result.skipped == ["1.4.5"]
    assert "install failed" in next(s.note for s in result.steps if s.point == "1.4.5")


def test_search_reports_the_untestable_candidates():
    points = list("abcdef")
    verdict = {"b": "good", "c": "skip", "d": "skip", "e": "bad"}
    lo, hi, untestable = search(points, lambda p: verdict[p])
    assert (points[lo], points[hi], sorted(points[i] for i in untestable)) == ("b", "e", ["c", "d"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["nosuchpkg", "--good", "1.0", "--bad", "1.9", "--", "true"],
            "unknown package 'nosuchpkg'",
        ),
        (["tkdemo", "--good", "1.4", "--bad", "1.4", "--", "true"], "are the same version 1.4"),
        (["tkdemo", "--good", "1.9", "--bad", "1.0", "--", "true"], "is newer than the bad end"),
        (["tkdemo", "--good", "1.4", "--bad", "1.5", "--", "true"], "no release of tkdemo between"),
        (["tkdemo", "--good", "1.0", "--bad", "1.9"], "no command to run"),
        (["tkdemo", "--good", "1.0", "--bad", "7.0", "--", "true"], "7.0 is not a known release"),
        (
            ["tkdemo", "--good", "1.0", "--bad", "1.9", "--", "false"],
            "the good end tkdemo 1.0 is bad, not good (exit 1)",
        ),
        (
            ["tkdemo", "--good", "1.0", "--bad", "1.9", "--", "true"],
            "the bad end tkdemo 1.9 is good",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, wheels, env_cache, capsys):
    extra = ["--find-links", str(wheels), "--cache-dir", str(env_cache), "--no-env-capture"]
    code = main(["bisect", "versions", *argv[:5], *extra, *argv[5:]])
    # Progress lines ("tkdemo 1.0: bad (0.3s)") come first; the error is the one last line.
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("tinykit:")]
    assert code == 2
    assert (
        len(err) == 1 and err[0].startswith("tinykit: error: BisectError: ") and message in err[0]
    )


def test_cli_prints_the_answer_and_json(wheels, env_cache, capsys):
    argv = ["bisect", "versions", "tkdemo", "--good", "1.0", "--bad", "1.9", "--find-links"]
    argv += [str(wheels), "--cache-dir", str(env_cache), "--no-env-capture", "--json", "--", CHECK]
    assert main(argv) == 0
    import json

    result = json.loads(capsys.readouterr().out)
    assert (result["first_bad"], result["last_good"]) == ("1.6", "1.5")
    assert (
        result["steps"][0]["command"] == CHECK and result["steps"][0]["runs"][0]["exit_code"] == 0
    )


def test_matrix_table_over_cached_environments(wheels, env_cache, capsys):
    argv = ["matrix", "tkdemo", "--versions", "1.0,1.5,1.6,1.9", "--find-links", str(wheels)]
    assert main([*argv, "--cache-dir", str(env_cache), "--", CHECK]) == 1  # 1.6 and 1.9 fail
    table = capsys.readouterr().out.splitlines()
    assert table[:2] == ["| tkdemo | outcome | exit | time |", "|---|---|---|---|"]
    assert [row.split(" | ")[:3] for row in table[2:6]] == [
        ["| 1.0", "good", "0"],
        ["| 1.5", "good", "0"],
        ["| 1.6", "bad", "1"],
        ["| 1.9", "bad", "1"],
    ]


def test_latest_patch_of_each_minor():
    from tinykit.bisect.matrix import latest_patches

    releases = ["4.57.1", "5.0.0", "5.0.1rc1", "5.1.0", "5.1.2", "5.1.10", "5.2.0", "6.0.0"]
    assert latest_patches(releases, "5.0") == ["5.0.0", "5.1.10", "5.2.0", "6.0.0"]
