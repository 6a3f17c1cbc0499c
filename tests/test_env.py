"""tinykit env capture / diff: no secret is written, bundles are byte-identical, diffs ranked."""

from __future__ import annotations

import copy
import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest
from _git import git
from hypothesis import given
from hypothesis import strategies as st

from tinykit.cli import main
from tinykit.errors import UsageError
from tinykit.repro.env import capture, diff, to_json
from tinykit.repro.redact import REDACTED, is_secret_name, scrub

REPO = Path(__file__).resolve().parents[1]

SECRETS = {
    "HF_TOKEN": "hf_FakeTokenForTinykitTests0123456789",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYFAKEKEY42",
    "HTTPS_PROXY": "http://proxyuser:Pr0xyPassw0rd@proxy.internal:3128",
    "PIP_INDEX_URL": "https://ci-bot:IndexPassw0rd77@pypi.internal/simple",
    "MY_SERVICE_URL": "postgres://app:DbPassw0rd99@db.internal/prod",  # an innocent name
    "NOTES_FOR_RUN": "used hf_AnotherFakeTokenPastedByMistake9876",
}
SECRET_VALUES = [
    "hf_FakeTokenForTinykitTests0123456789",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYFAKEKEY42",
    "Pr0xyPassw0rd",
    "IndexPassw0rd77",
    "DbPassw0rd99",
    "hf_AnotherFakeTokenPastedByMistake9876",
]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "tinykit", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
    )


def test_secrets_never_reach_a_captured_bundle(tmp_path):
    out = tmp_path / "env.json"
    result = _cli("env", "capture", "--all-env", "-o", str(out), env=SECRETS)
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    for value in SECRET_VALUES:
        assert value not in text
        assert value not in result.stdout + result.stderr
    env = json.loads(text)["env"]
    assert env["HF_TOKEN"] == REDACTED and env["AWS_SECRET_ACCESS_KEY"] == REDACTED
    assert env["HTTPS_PROXY"] == f"http://proxyuser:{REDACTED}@proxy.internal:3128"
    assert env["MY_SERVICE_URL"] == f"postgres://app:{REDACTED}@db.internal/prod"


def test_default_capture_keeps_relevant_variables_only(monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # TOKEN inside a word: not a secret
    monkeypatch.setenv("SOME_UNRELATED_THING", "x")
    bundle = capture()
    text = to_json(bundle)
    assert not any(value in text for value in SECRET_VALUES)
    env = bundle["env"]
    assert env["CUDA_VISIBLE_DEVICES"] == "1,0" and env["TOKENIZERS_PARALLELISM"] == "false"
    assert env["HF_TOKEN"] == REDACTED and "SOME_UNRELATED_THING" not in env
    assert "AWS_SECRET_ACCESS_KEY" not in env and "MY_SERVICE_URL" not in env


@given(
    user=st.text("abcdefgh", min_size=1, max_size=8),
    password=st.text("XYZ0123456789!$%", min_size=4),
)
def test_scrub_removes_any_url_password(user, password):
    assert password not in scrub(f"git+https://{user}:{password}@example.com/org/repo.git@main")


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("WANDB_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("GH_PAT", True),
        ("MYAPITOKEN", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("PWD", False),
        ("KEYBOARD_LAYOUT", False),
        ("PATH", False),
    ],
)
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


def _fake_dist(site: Path, name: str, direct_url: dict) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "direct_url.json").write_text(json.dumps(direct_url))


def test_editable_and_vcs_installs_record_commit_diff_and_untracked_without_secrets(
    tmp_path, monkeypatch
):
    repo = tmp_path / "clone"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "mod.py").write_text("X = 1\n")
    git(repo, "add", "mod.py")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    (repo / "mod.py").write_text("X = 2\nTOKEN = 'hf_LeakedInAnUncommittedDiff12345678'\n")
    (repo / "notes.txt").write_text("untracked\n")
    site = tmp_path / "site"
    _fake_dist(site, "fake-editable", {"url": repo.as_uri(), "dir_info": {"editable": True}})
    _fake_dist(
        site,
        "fake-vcs",
        {
            "url": "https://alice:VcsPassw0rd1@git.example.com/x.git",
            "vcs_info": {"vcs": "git", "commit_id": "abc123"},
        },
    )
    monkeypatch.syspath_prepend(str(site))

    bundle = capture()
    editable, vcs = bundle["sources"]["fake-editable"], bundle["sources"]["fake-vcs"]
    assert bundle["packages"]["fake-editable"] == "1.0"
    assert editable["editable"] and editable["commit"] == git(repo, "rev-parse", "HEAD")
    assert editable["dirty"] and editable["untracked"] == ["notes.txt"]
    assert "+X = 2" in editable["diff"] and "hf_LeakedInAnUncommittedDiff" not in editable["diff"]
    assert vcs == {
        "url": f"https://alice:{REDACTED}@git.example.com/x.git",
        "vcs": "git",
        "commit": "abc123",
    }


def test_capture_is_byte_identical_and_written_atomically(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    capture(a)
    capture(b)
    assert a.read_bytes() == b.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]  # no temp files left
    bundle = json.loads(a.read_text())
    assert bundle["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert bundle["torch"]["version"].startswith("2.") and "torch" in bundle["packages"]


def test_capture_into_a_missing_directory_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        capture(tmp_path / "nope" / "env.json")
    assert not (tmp_path / "nope").exists()


@pytest.fixture(scope="module")
def base_bundle() -> dict:
    return capture()


def test_diff_lists_library_versions_then_env_then_hardware(base_bundle):
    a = base_bundle
    b = copy.deepcopy(a)
    b["os"]["hostname"] = "other-host"
    b["cpu"]["model"] = "Some Other CPU"
    b["env"]["CUDA_VISIBLE_DEVICES"] = "3"
    b["packages"]["zzz-unrelated"] = "0.1"
    b["packages"]["transformers"] = "4.57.1"
    b["torch"]["cuda"] = "12.8"
    result = diff(a, b)
    keys = [f"{e.section}.{e.key}" for e in result.entries]
    assert keys == [
        "packages.transformers",
        "torch.cuda",
        "packages.zzz-unrelated",
        "env.CUDA_VISIBLE_DEVICES",
        "cpu.model",
        "os.hostname",
    ]
    assert result.entries[0].a == a["packages"]["transformers"] and result.entries[0].b == "4.57.1"
    assert result.entries[2].a is None
    assert diff(a, copy.deepcopy(a)).entries == []


def test_diff_cli_text_and_json(tmp_path, capsys, base_bundle):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(to_json(base_bundle))
    other = copy.deepcopy(base_bundle)
    other["packages"]["transformers"] = "5.0.0"
    b.write_text(to_json(other))
    assert main(["env", "diff", str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0].startswith("1 differences between")
        and lines[1].strip().startswith("packages.transformers: ")
        and lines[1].endswith("-> 5.0.0")
    )
    assert main(["env", "diff", str(a), str(b), "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert entries[0]["key"] == "transformers" and entries[0]["b"] == "5.0.0"


@pytest.mark.parametrize("content", [None, "{not json", '{"hello": 1}'])
def test_diff_of_something_that_is_not_a_bundle_exits_2(tmp_path, capsys, content, base_bundle):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(to_json(base_bundle))
    if content is not None:
        bad.write_text(content)
    assert main(["env", "diff", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tinykit env capture -o FILE" in err


@pytest.mark.tinykit_slow  # the plugin skips it unless TINYKIT_RUN_SLOW=1
def test_diff_of_two_venvs_names_the_transformers_version_first(tmp_path):
    import transformers

    other = "5.23.0" if transformers.__version__ != "5.23.0" else "5.22.2"
    bundles = []
    for name, pin in (("same", None), ("other", other)):
        venv = tmp_path / name
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        # See this interpreter's packages (a venv's too, which --system-site-packages would skip)
        # behind the new venv's own, so a pin installed there wins.
        child_site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        Path(child_site, "tinykit-base.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        if pin:
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "--no-deps", f"transformers=={pin}"],
                check=True,
                timeout=600,
            )
        out = tmp_path / f"{name}.json"
        run = subprocess.run(
            [str(python), "-m", "tinykit", "env", "capture", "-o", str(out)],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        bundles.append(out)
    result = diff(*bundles)
    first = result.entries[0]
    assert (first.section, first.key, first.a, first.b) == (
        "packages",
        "transformers",
        transformers.__version__,
        other,
    )


def test_capture_without_output_prints_the_bundle(capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRETS["HF_TOKEN"])
    assert main(["env", "capture"]) == 0
    out = capsys.readouterr().out
    assert SECRETS["HF_TOKEN"] not in out
    assert json.loads(out)["env"]["HF_TOKEN"] == REDACTED


def test_a_package_version_is_read_as_installed_until_its_code_runs(tmp_path, monkeypatch):
    """package_versions reads an installed distribution's metadata afresh until the package is
    imported; from then on it reports the version whose code this process runs."""
    from tinykit._versions import package_versions

    name = "tinykit_probe_pkg"
    info = tmp_path / f"{name}-1.0.dist-info"
    info.mkdir()
    (tmp_path / f"{name}.py").write_text("VALUE = 1\n")

    def install(version: str) -> None:
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")

    monkeypatch.syspath_prepend(str(tmp_path))
    install("1.0")
    assert package_versions([name]) == {name: "1.0"}
    install("2.0")  # upgraded before anything imported it: the new version
    assert package_versions([name]) == {name: "2.0"}
    monkeypatch.delitem(sys.modules, name, raising=False)
    __import__(name)
    assert package_versions([name]) == {name: "2.0"}
    install("3.0")  # upgraded under running code: the version that runs
    assert package_versions([name]) == {name: "2.0"}
    assert package_versions(["no-such-package-tinykit"]) == {"no-such-package-tinykit": "absent"}
