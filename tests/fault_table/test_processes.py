"""The fault table's real processes: signals, concurrent writers, stale temp folders, exit codes of
signalled commands, process groups, timeouts, and the repairs a corrupt cache gets."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
from _git import commit_all, git, new_repo
from conftest import HUB_FILES, REPO, with_ctrl_c

from fault_table.broken import CORRUPT, cache_entry, write_remote_code
from tinykit._files import file_hashes
from tinykit.cli import main

BERT = HUB_FILES / "google-bert" / "bert-base-uncased"


# -- signals and concurrent writers: real processes -----------------------------------------


def _tinykit(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "tinykit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=with_ctrl_c,
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
    assert proc.returncode in (code, 0) and "Traceback" not in err, err
    # mid-write: nothing; after the rename into place (a loaded box is slow to exit): all of it
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == [] or (written == ["t"] and (tmp_path / "t" / "model.safetensors").is_file())


def test_sigterm_stops_hub_serve_and_removes_its_lfs_folder(tmp_path):
    # its own temp folder: other tests' servers (xdist workers) make theirs in /tmp meanwhile
    temp, hub = tmp_path / "tmp", tmp_path / "hub"
    temp.mkdir()
    hub.mkdir()
    proc = _tinykit("hub", "serve", str(hub), "--quiet", env={"TMPDIR": str(temp)})
    assert "Serving" in proc.stdout.readline()
    assert [p.name[:16] for p in temp.iterdir()] == ["tinykit-hub-lfs-"]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and err == ""
    assert list(temp.iterdir()) == []


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
        dist_launch(leaves_early, world_size=2, timeout=60, fresh=True)
    head = str(info.value).splitlines()[0]
    assert info.value.exit_code == 1 and "Traceback" not in head
    assert "failed: rank 1 exited early with code 0 before returning (it left the job)" in head
    assert [r["exit_code"] for r in info.value.per_rank] == [None, 0]


# -- a user's command runs in its own process group, and ends with everything it started ------


def _sleeper() -> str:
    """`sleep` for a unique, long time: its command line finds it among all processes."""
    return f"sleep {400 + random.random():.6f}"


def _alive(tag: str) -> list[str]:
    return [
        " ".join(p.info["cmdline"])
        for p in psutil.process_iter(["cmdline", "status"])
        if p.info["status"] != psutil.STATUS_ZOMBIE and tag in " ".join(p.info["cmdline"] or [])
    ]


def _gone(tag: str, seconds: float = 10) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := _alive(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize(
    "script,code", [("kill -9 $$", 137), ("ulimit -c 0; kill -SEGV $$", 139), ("exit 3", 3)]
)
def test_mem_run_exits_as_a_shell_reports_its_command(script, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["mem", "run", "--", "sh", "-c", script]) == code  # not 247/245


def test_mem_run_timeout_ends_the_whole_tree(capsys):
    sleep = _sleeper()
    assert main(["mem", "run", "--timeout", "1", "--", "sh", "-c", f"{sleep} & {sleep}"]) == 124
    assert "stopped at its timeout" in capsys.readouterr().err
    assert _gone(sleep) == []


def test_discover_timeout_ends_the_whole_tree(tmp_path, capsys):
    sleep = _sleeper()
    argv = ["standins", "discover", "--timeout", "1", "--passes", "1", "-o", str(tmp_path / "m")]
    assert main([*argv, "--", "sh", "-c", f"{sleep} & {sleep}"]) == 0
    assert "ran past --timeout 1 s" in capsys.readouterr().err
    assert _gone(sleep) == [] and (tmp_path / "m").is_file()


def test_a_command_that_leaves_a_child_running_is_not_waited_for():
    from tinykit._procs import run_command

    sleep = _sleeper()
    started = time.monotonic()
    done = run_command(["sh", "-c", f"{sleep} & echo started"], capture=True)
    assert done.returncode == 0 and done.output == "started\n"
    assert time.monotonic() - started < 60 and _gone(sleep) == []  # its sleep is 400 s


@pytest.mark.parametrize(
    "command,sig,code",
    [
        (("mem", "run"), signal.SIGTERM, 143),
        (("mem", "run"), signal.SIGINT, 130),
        (("standins", "discover", "--passes", "1"), signal.SIGTERM, 143),
    ],
    ids=["mem run SIGTERM", "mem run SIGINT", "discover SIGTERM"],
)
def test_a_signal_reaches_the_commands_whole_tree(command, sig, code):
    sleep = _sleeper()
    proc = _tinykit(*command, "--", "sh", "-c", f"{sleep} & {sleep}")
    deadline = time.monotonic() + 120
    while len(_alive(sleep)) < 2:  # both sleeps started: the tree is there
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and "Traceback" not in err, err
    assert _gone(sleep) == []  # its children and grandchildren too, not only the direct child


def test_a_timed_out_step_beside_the_first_bad_commit_leaves_both_undecided(tmp_path, capsys):
    repo = new_repo(tmp_path / "repo")
    # shell checks, not Python: a good step ends in milliseconds, far inside its timeout even on
    # a loaded box, so only c2 can time out
    checks = ["exit 0", "exit 0", "sleep 600", "exit 1"]
    for i, check in enumerate(checks):
        (repo / "check.sh").write_text(f"# c{i}\n{check}\n")
        commit_all(repo, f"c{i}", tag=f"c{i}")
    argv = ["bisect", "commits", "--repo", str(repo), "--good", "c0", "--bad", "c3"]
    argv += ["--install", "true", "--timeout", "5", "--", "sh check.sh"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    c2, c3 = git(repo, "rev-parse", "c2")[:10], git(repo, "rev-parse", "c3")[:10]
    assert f"the first bad commit is one of {c2}, {c3}" in out


def _orphan(sleep: str, env: dict[str, str]) -> None:
    """Start `sleep` as an orphan: the shell that starts it exits at once, and init adopts it."""
    subprocess.run(["sh", "-c", f"{sleep} >/dev/null 2>&1 &"], check=True, env=env)


def test_the_after_suite_check_finds_what_this_session_left_and_nothing_else():
    """tests/conftest.py's check: an orphan of this session is found; another session's orphan
    and the interpreter's resource tracker (it ends with this process) are not."""
    from multiprocessing import resource_tracker

    from conftest import OWNER_VAR, _left_behind

    ours, theirs = _sleeper(), _sleeper()
    _orphan(ours, dict(os.environ))
    _orphan(theirs, {**os.environ, OWNER_VAR: "another-session"})
    resource_tracker.ensure_running()
    try:
        found = [" ".join(p.cmdline()) for p in _left_behind()]
        assert [c for c in found if ours in c], found
        assert not [c for c in found if theirs in c or "resource_tracker" in c], found
    finally:
        for p in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if any(tag in " ".join(p.info["cmdline"] or []) for tag in (ours, theirs)):
                    p.kill()
    assert _gone(ours) == [] and _gone(theirs) == []


# -- the Hub: every read has a timeout ---------------------------------------------------------


@pytest.fixture
def stalling_hub(monkeypatch):
    """A loopback server that accepts connections and never answers; reads time out in 0.5 s."""
    import socket
    import threading

    from huggingface_hub import constants

    from tinykit.hub import client

    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 0.5)
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:  # hold every connection open, answer nothing
        with contextlib.suppress(OSError):
            while True:
                held.append(server.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    with client.use_endpoint(f"http://127.0.0.1:{server.getsockname()[1]}"):
        yield
    server.close()
    for conn in held:
        conn.close()


def test_slice_from_a_hub_that_stalls_fails_in_bounded_time(stalling_hub, tmp_path, capsys):
    started = time.monotonic()
    assert main(["slice", "o/n", "-o", str(tmp_path / "s")]) == 3
    assert "timed out" in capsys.readouterr().err and time.monotonic() - started < 60
    assert list(tmp_path.iterdir()) == []


# -- a model that cannot fit, a rank that segfaults --------------------------------------------


def test_mem_project_full_refuses_a_model_that_cannot_fit_before_running_it():
    from tinykit.errors import SetupError
    from tinykit.memory.project import Projection, _check_fits

    huge = Projection(
        "big", "host", False, None, "bfloat16", 8, 1, "n", 96, {}, {}, 0, {}, 1 << 60, 0
    )
    with pytest.raises(SetupError, match="projected at .* more than the .* available"):
        _check_fits(huge)


def segfaults():
    import ctypes

    import torch
    import torch.distributed as dist

    if dist.get_rank() == 1:
        ctypes.string_at(0)  # a segfault, while rank 0 waits in a collective
    dist.all_reduce(torch.ones(1))
    return "unreachable"


def test_a_rank_that_segfaults_is_the_one_blamed(dist_launch):
    from tinykit.errors import DistributedTestFailed

    with pytest.raises(DistributedTestFailed) as info:
        dist_launch(segfaults, world_size=2, timeout=60, fresh=True)
    head = str(info.value).splitlines()[0]
    assert "failed: rank 1 was killed by signal 11 before returning" in head
