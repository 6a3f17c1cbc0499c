"""tinykit._files: atomic writes, folder replacement (also raced by two real processes), digests."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tinykit._files import (
    atomic_write,
    file_hashes,
    remove_stale_staging,
    replace_folder,
    sha256_file,
    tree_digest,
)
from tinykit.errors import UsageError
from tinykit.source import folder_digest


def test_atomic_write_replaces_whole_and_cleans_up_on_failure(tmp_path):
    target = tmp_path / "x.json"
    atomic_write(target, "one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    with pytest.raises(TypeError):
        atomic_write(target, 3)  # type: ignore[arg-type]
    assert target.read_bytes() == b"two" and os.listdir(tmp_path) == ["x.json"]


def test_replace_folder_accepts_missing_or_empty_and_needs_force_otherwise(tmp_path):
    out = tmp_path / "out"
    out.mkdir()  # empty: allowed
    with replace_folder(out) as staging:
        assert staging.parent == tmp_path and staging.name.startswith(".out.tmp-")
        (staging / "tinykit.json").write_text("a")  # a build's provenance: --force may replace it
    assert os.listdir(out) == ["tinykit.json"]
    refused = pytest.raises(UsageError, match="already exists and is not empty. Pass --force")
    with refused, replace_folder(out):
        raise AssertionError("not reached: refused before any work")
    with replace_folder(out, force=True) as staging:
        (staging / "b.txt").write_text("b")
    assert os.listdir(out) == ["b.txt"] and os.listdir(tmp_path) == ["out"]


def test_force_replaces_only_a_folder_a_build_wrote(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    mine = pytest.raises(UsageError, match="--force will not replace .* no tinykit.json")
    with mine, replace_folder(out, force=True):
        raise AssertionError("not reached")
    (out / "tinykit.json").write_text("{}")  # a build's folder, but it holds an input now
    an_input = pytest.raises(UsageError, match=r"holds .*notes.txt \(an input\)")
    with an_input, replace_folder(out, force=True, keep=[out / "notes.txt"]):
        raise AssertionError("not reached")
    monkeypatch.chdir(out)
    here = pytest.raises(UsageError, match=r"\(the current folder\)")
    with here, replace_folder(out, force=True):
        raise AssertionError("not reached")
    monkeypatch.chdir(tmp_path)
    with replace_folder(out, force=True, built=lambda folder: None) as staging:
        (staging / "new.txt").write_text("new")
    assert os.listdir(out) == ["new.txt"]


def test_a_failed_write_leaves_the_old_folder_and_no_temp(tmp_path):
    out = tmp_path / "out"
    with replace_folder(out) as staging:
        (staging / "tinykit.json").write_text("a")
    with pytest.raises(RuntimeError, match="boom"), replace_folder(out, force=True) as staging:
        (staging / "half.txt").write_text("half")
        raise RuntimeError("boom")
    assert os.listdir(out) == ["tinykit.json"] and os.listdir(tmp_path) == ["out"]


def test_a_folder_that_appears_meanwhile_is_kept_without_force(tmp_path):
    out = tmp_path / "out"
    lost = pytest.raises(UsageError, match="appeared meanwhile .*Pass --force")
    with lost, replace_folder(out) as staging:
        (staging / "mine.txt").write_text("mine")
        out.mkdir()
        (out / "theirs.txt").write_text("theirs")  # another writer won the race
    assert os.listdir(out) == ["theirs.txt"] and os.listdir(tmp_path) == ["out"]
    shutil.rmtree(out)
    with replace_folder(out) as staging:
        (staging / "mine.txt").write_text("mine")
        out.mkdir()  # an empty folder appearing meanwhile is no conflict
    assert os.listdir(out) == ["mine.txt"]


def test_stale_staging_folders_of_killed_writers_are_removed(tmp_path):
    out = tmp_path / "out"
    stale, fresh = tmp_path / ".out.tmp-dead", tmp_path / ".out.tmp-busy"
    killed, alive = tmp_path / ".out.tmp-999999999-x", tmp_path / f".out.tmp-{os.getpid()}-y"
    for folder in (stale, fresh, killed, alive):
        folder.mkdir()
    old = time.time() - 3600
    os.utime(stale, (old, old))
    remove_stale_staging(out)
    assert not stale.exists() and not killed.exists() and fresh.exists() and alive.exists()


def test_one_digest_for_a_folder_everywhere(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(b"a" * 3_000_000)
    (tmp_path / "sub" / "b.txt").write_text("b")
    assert sha256_file(tmp_path / "a.bin") == hashlib.sha256(b"a" * 3_000_000).hexdigest()
    assert list(file_hashes(tmp_path)) == ["a.bin", "sub/b.txt"]
    assert folder_digest(tmp_path) == "sha256:" + tree_digest(tmp_path)
    before = tree_digest(tmp_path)
    (tmp_path / "sub" / "b.txt").rename(tmp_path / "sub" / "c.txt")
    assert tree_digest(tmp_path) != before  # names count, not only bytes


def test_two_processes_make_tiny_into_one_folder(tmp_path):
    """One wins; the other fails with one line and exit 2; the folder is the winner's, whole."""
    out = tmp_path / "tiny"
    command = [sys.executable, "-m", "tinykit", "make-tiny", "llama", "-o", str(out), "--json"]
    procs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    [(_, stdout, _)] = [r for r in results if r[0] == 0]
    [(_, _, stderr)] = [r for r in results if r[0] == 2]
    *stages, error = stderr.splitlines()  # stage lines ("tinykit: resolving ..."), then the error
    assert all(not s.startswith("tinykit: error") for s in stages), stderr
    assert error.startswith(f"tinykit: error: UsageError: output folder {out} "), stderr
    assert "appeared meanwhile" in stderr or "already exists" in stderr
    manifest = json.loads((out / "tinykit.json").read_text())
    built = {name: info["sha256"] for name, info in json.loads(stdout)["files"].items()}
    assert manifest["files"] == {k: v for k, v in built.items() if k != "tinykit.json"}
    assert file_hashes(out, skip=("tinykit.json",)) == manifest["files"]
    assert os.listdir(tmp_path) == ["tiny"]  # no staging folder left behind


def test_a_replaced_folder_follows_the_umask_whatever_its_writers_did(tmp_path):
    """safetensors writes through a private temp file (0600) and mkdtemp makes the staging
    folder 0700: a fixture folder shared with another user or a container must be readable."""
    import torch
    from safetensors.torch import save_file

    old = os.umask(0o027)
    try:
        with replace_folder(tmp_path / "out") as staging:
            save_file({"w": torch.zeros(2)}, str(staging / "model.safetensors"))
            (staging / "sub").mkdir(mode=0o700)
            (staging / "sub" / "run.sh").write_text("#!/bin/sh\n")
            (staging / "sub" / "run.sh").chmod(0o700)
        atomic_write(tmp_path / "x.json", "{}")
    finally:
        os.umask(old)
    modes = {
        p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777
        for p in [tmp_path / "out", *tmp_path.rglob("*")]
    }
    assert modes == {
        "out": 0o750,
        "out/model.safetensors": 0o640,
        "out/sub": 0o750,
        "out/sub/run.sh": 0o750,  # executable stays executable
        "x.json": 0o640,
    }
