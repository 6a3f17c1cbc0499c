"""`tinykit hub serve DIR`: a real process serving real clients in other processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request

from conftest import HUB_FILES, REPO, with_ctrl_c

_CLIENT = """
from pathlib import Path
from huggingface_hub import HfApi, hf_hub_download
print(Path(hf_hub_download("qwen/qwen3-8b", "config.json")).read_text()[:1])
api = HfApi()
api.create_repo("me/pushed")
api.upload_file(path_or_fileobj=b'{"pushed": 1}', path_in_repo="config.json", repo_id="me/pushed")
"""


def _start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "tinykit", "hub", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=with_ctrl_c,
    )


def test_serve_prints_the_client_env_serves_clients_and_takes_pushes(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(HUB_FILES / "Qwen", tree / "Qwen")
    server = _start(str(tree), "--json")
    try:
        lines = []
        while not lines or lines[-1] != "}\n":  # emit() pretty-prints: the object ends alone
            lines.append(server.stdout.readline())
        info = json.loads("".join(lines))
        assert info["endpoint"].startswith("http://127.0.0.1:")
        assert (
            info["env"]["HF_ENDPOINT"] == info["endpoint"]
            and info["env"]["HF_HUB_DISABLE_XET"] == "1"
        )
        with urllib.request.urlopen(info["endpoint"] + "/api/models/Qwen/Qwen3-8B") as r:
            assert json.load(r)["id"] == "Qwen/Qwen3-8B"
        env = {**os.environ, **info["env"], "HF_HOME": str(tmp_path / "hf-home")}
        client = subprocess.run(
            [sys.executable, "-c", _CLIENT], env=env, capture_output=True, text=True
        )
        assert client.returncode == 0, client.stderr
        assert client.stdout.strip() == "{"
        assert json.loads((tree / "me" / "pushed" / "config.json").read_text()) == {"pushed": 1}
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=90)  # a loaded 2-core CI box under -n 2
    assert server.returncode == 0
    assert "GET 200 /api/models/Qwen/Qwen3-8B" in err
    assert "POST 200 /api/repos/create" in err


def test_serving_a_missing_folder_is_a_one_line_usage_error(tmp_path):
    server = _start(str(tmp_path / "nope"))
    out, err = server.communicate(timeout=60)
    assert server.returncode == 2 and out == ""
    assert err.startswith("tinykit: error: UsageError: Cannot serve") and err.count("\n") == 1


def test_serving_a_taken_port_is_a_one_line_usage_error(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = _start(str(tmp_path), "--port", str(taken.getsockname()[1]))
        _, err = server.communicate(timeout=60)
    assert server.returncode == 2
    assert "Cannot listen on 127.0.0.1:" in err and "--port" in err and err.count("\n") == 1
