"""The fault table's real processes: signals, concurrent writers, stale temp folders, exit codes of
signalled commands, process groups, timeouts, and the repairs a corrupt cache gets."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HUB_FILES, REPO

from fault_table.broken import CORRUPT, cache_entry, write_remote_code
from tinykit._files import file_hashes
from tinykit.cli import main

BERT = HUB_FILES / "google-bert" / "bert-base-uncased"


# -- signals and concurrent writers: real processes -----------------------------------------


def _tinykit(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "tinykit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kwargs,
    )


def test_sigterm_mid_write_leaves_no_temp_folder(tmp_path):
    sig, code = signal.SIGTERM, 143  # SIGINT (130) takes the very same path: KeyboardInterrupt
    proc = _tinykit("make-tiny", "llama", "-o", str(tmp_path / "t"))
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".t.tmp-*")) and proc.poll() is None:
        assert time.monotonic() < deadline, "make-tiny never started writing"
        time.sleep(0.02)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:  # finished before the signal landed: still nothing half-written
        assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]
        return
    assert proc.returncode == code, err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


def test_sigterm_stops_hub_serve_and_removes_its_lfs_folder(tmp_path):
    before = set(Path("/tmp").glob("tinykit-hub-lfs-*"))
    proc = _tinykit("hub", "serve", str(tmp_path), "--quiet")
    assert "Serving" in proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == ""
    assert set(Path("/tmp").glob("tinykit-hub-lfs-*")) <= before


def test_a_stale_temp_folder_of_a_killed_run_is_removed_by_the_next_write(tmp_path, inputs):
    stale = tmp_path / ".d.tmp-999999999-dead"  # the pid of no process
    stale.mkdir()
    (stale / "half.parquet").write_bytes(b"half")
    args = ["make-synthetic-dataset", "--features", str(inputs / "feat.json"), "-o"]
    assert main([*args, str(tmp_path / "d"), "--rows", "2"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_two_concurrent_writers_into_one_folder_end_in_one_result_and_one_line(tmp_path):
    args = ("make-tiny-tokenizer", str(BERT), "-o")
    procs = [_tinykit(*args, str(tmp_path / "d"), cwd=tmp_path) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 0], [0, 2]), results
    for code, err in results:
        assert "Traceback" not in err and (code == 0 or err.count("\n") == 1), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    assert (tmp_path / "d" / "tokenizer.json").is_file()


# -- the same faults with rebuilding on: repaired, never served -------------------------------


def test_corrupt_cache_entries_are_rebuilt_by_fixtures_build_verify_and_the_plugin(
    built_fixtures, tmp_path, capsys
):
    from tinykit.artifacts.cache import Cache
    from tinykit.pytest_plugin.fixtures import Factory, TinyModel

    shutil.copytree(built_fixtures, tmp_path / "f")
    fx, cache = tmp_path / "f" / "fx", tmp_path / "f" / "cache"
    locked = json.loads((fx / "lock.json").read_text())["fixtures"]
    args = ["--fixtures-dir", str(fx), "--cache-dir", str(cache)]
    CORRUPT["parquet truncated"](cache)
    capsys.readouterr()
    assert main(["fixtures", "build", *args]) == 0  # rebuilt, not "exit 0 and serve it"
    assert "is corrupt (data/train-00000-of-00001.parquet changed" in capsys.readouterr().err
    assert file_hashes(cache_entry(cache, "synthetic_dataset")) == locked["tiny-d"]["files"]
    CORRUPT["weights truncated"](cache)
    assert main(["fixtures", "verify", *args]) == 0  # rebuilt: nothing to advise locking
    out, err = capsys.readouterr()
    assert "2 fixture(s) match lock.json" in out and "fixtures lock" not in out + err
    assert "is corrupt (model.safetensors changed" in err
    assert file_hashes(cache_entry(cache, "model")) == locked["tiny-m"]["files"]
    CORRUPT["weights truncated"](cache)
    # the tiny_model fixture's factory, as a test calls it: a model, never a SafetensorError
    factory = Factory(TinyModel, "model", Cache(cache), (fx,), {})
    model = factory("tiny-m")
    assert type(model.model).__name__ == "LlamaForCausalLM"
    assert file_hashes(model.path) == locked["tiny-m"]["files"]


def test_a_local_folder_with_its_own_code_builds_and_verifies_when_trusted(tmp_path, capsys):
    source = write_remote_code(tmp_path / "src", ran=tmp_path / "ran")
    out = tmp_path / "tiny"
    assert main(["make-tiny", str(source), "-o", str(out), "--trust-remote-code"]) == 0
    assert (tmp_path / "ran").is_file()  # the code ran, as asked
    assert {"configuration_tinyrc.py", "modeling_tinyrc.py", "tokenizer.json"} <= {
        p.name for p in out.iterdir()
    }
    capsys.readouterr()
    assert main(["verify", str(out), "--trust-remote-code"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("OK")
    (tmp_path / "ran").unlink()
    assert main(["verify", str(out)]) == 2  # untrusted: refused before the code runs
    assert not (tmp_path / "ran").exists()


# -- distributed: a rank that leaves early ----------------------------------------------------


def leaves_early():
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 1:
        os._exit(0)  # leaves without a word: no exception, exit status 0
    dist.all_reduce(torch.ones(1))  # rank 0 then fails here, and its error is seen first
    return "unreachable"


def test_a_rank_that_exits_early_with_code_0_is_the_one_blamed(dist_launch):
    from tinykit.errors import DistributedTestFailed

    with pytest.raises(DistributedTestFailed) as info:
        dist_launch(leaves_early, world_size=2, timeout=30, fresh=True)
    head = str(info.value).splitlines()[0]
    assert info.value.exit_code == 1 and "Traceback" not in head
    assert "failed: rank 1 exited early with code 0 before returning (it left the job)" in head
    assert [r["exit_code"] for r in info.value.per_rank] == [None, 0]
