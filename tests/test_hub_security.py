"""`tinykit hub serve` as an attacker and an unlucky client meet it: a real server process, raw
HTTP on 127.0.0.1. Traversal in every route, symlinks, all-or-nothing commits, the write token,
foreign Origin/Host, read-only mode, and malformed requests that must get a 4xx JSON answer.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

SECRET = b"outside the served folder"
CONFIG = b'{"model_type": "bert"}'


class Hub:
    def __init__(self, proc: subprocess.Popen, info: dict, root: Path) -> None:
        self.proc, self.root = proc, root
        self.port = int(info["endpoint"].rsplit(":", 1)[1])
        self.token = info["env"].get("HF_TOKEN")

    def request(self, method, path, body=b"", headers=None, token=True):
        """(status, headers, parsed JSON or raw bytes); the connection must not be dropped."""
        headers = dict(headers or {})
        if token and self.token:
            headers.setdefault("Authorization", f"Bearer {self.token}")
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
        finally:
            conn.close()
        is_json = r.headers.get("Content-Type", "").startswith("application/json")
        return r.status, r.headers, json.loads(data) if is_json and data else data

    def raw(self, data: bytes, wait: float = 30) -> bytes:
        """Send bytes as they are; return all the server answers before it closes (it must)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=wait) as s:
            s.sendall(data)
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
            return b"".join(chunks)

    def commit(self, repo: str, *operations: dict, token=True, headers=None):
        lines = [{"key": "header", "value": {"summary": "t", "description": ""}}, *operations]
        body = "\n".join(json.dumps(line) for line in lines).encode()
        hdrs = {"Content-Type": "application/x-ndjson", **(headers or {})}
        return self.request("POST", f"/api/models/{repo}/commit/main", body, hdrs, token)


def _serve(base: Path, *args: str) -> Hub:
    root = base / "served"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "tinykit", "hub", "serve", str(root), "--json", "--quiet"]
    proc = subprocess.Popen(
        [*command, "--read-timeout", "2", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    while not lines or lines[-1] != "}\n":
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        lines.append(line)
    return Hub(proc, json.loads("".join(lines)), root)


def _stop(hub: Hub) -> str:
    hub.proc.send_signal(signal.SIGTERM)
    _, err = hub.proc.communicate(timeout=30)
    assert hub.proc.returncode == 0, err
    return err


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("hub-security")
    (base / "sibling").mkdir()
    (base / "sibling" / "secret.txt").write_bytes(SECRET)
    repo = base / "served" / "org" / "repo"
    repo.mkdir(parents=True)
    (repo / "config.json").write_bytes(CONFIG)
    (repo / "leak.txt").symlink_to(base / "sibling" / "secret.txt")
    (repo / "alias.json").symlink_to(repo / "config.json")
    (repo / "out").symlink_to(base / "sibling", target_is_directory=True)
    return base


@pytest.fixture(scope="module")
def hub(tree):
    server = _serve(tree)
    yield server
    err = _stop(server)
    assert "Traceback" not in err, err
    assert not list(tree.glob("tinykit-hub-lfs-*"))


def _repo(hub: Hub, name: str) -> Path:
    """A fresh repo `sec/<name>` holding config.json, straight on disk in the served folder."""
    folder = hub.root / "sec" / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(CONFIG)
    return folder


def _file(path: str, data: bytes) -> dict:
    return {"key": "file", "value": {"path": path, "content": base64.b64encode(data).decode()}}


def _outside(tree: Path) -> list[str]:
    """Everything beside the served folder, so an escaping write shows up."""
    return sorted(
        p.relative_to(tree).as_posix() for p in tree.rglob("*") if "served" not in p.parts
    )


# -- traversal: every route, repo id parts and file paths ------------------------------------

TRAVERSAL_READS = [
    "/%2e%2e/sibling/resolve/main/secret.txt",
    "/datasets/%2e%2e/sibling/resolve/main/secret.txt",
    "/spaces/%2e%2e/sibling/resolve/main/secret.txt",
    "/org/%2e%2e/resolve/main/served/org/repo/config.json",
    "/api/models/%2e%2e/sibling",
    "/api/models/%2e%2e/sibling/tree/main",
    "/api/models/%2e%2e/sibling/tree/main?recursive=true",
    "/api/datasets/%2e%2e/sibling/revision/main",
    "/api/models/%2e%2e/sibling/refs",
    "/api/models/%2e/sibling/tree/main",
    "/api/models/org%2f..%2f../sibling/tree/main",
    "/api/models/org/%2e%2e%2fsibling/tree/main",
    "/_cdn/models/%2e%2e/sibling/0/secret.txt",
    "/_cdn/datasets/%2e%2e/%2e%2e/0/sibling/secret.txt",
    "/org/repo/resolve/main/%2e%2e/%2e%2e/%2e%2e/sibling/secret.txt",
]


@pytest.mark.parametrize("path", TRAVERSAL_READS)
def test_reads_never_leave_the_served_folder(hub, path):
    status, headers, body = hub.request("GET", path)
    assert status in (400, 404), (status, body)
    assert isinstance(body, dict) and "error" in body
    assert headers.get("X-Error-Code") in ("BadRequest", "RepoNotFound", "EntryNotFound")
    assert SECRET.decode() not in json.dumps(body)


TRAVERSAL_WRITES = [
    ("POST", "/api/models/%2e%2e/%2e%2e/commit/main", "commit"),
    ("POST", "/api/models/%2e%2e/sibling/commit/main", "commit"),
    ("POST", "/api/datasets/%2e%2e/sibling/commit/main", "commit"),
    ("POST", "/api/models/%2e%2e/sibling/preupload/main", "preupload"),
    ("POST", "/%2e%2e/sibling.git/info/lfs/objects/batch", "batch"),
]


@pytest.mark.parametrize("method,path,kind", TRAVERSAL_WRITES)
def test_writes_through_a_dotdot_repo_id_are_refused(hub, tree, method, path, kind):
    before = _outside(tree)
    body = {
        "commit": b'{"key":"header","value":{}}\n'
        + json.dumps(_file("pwned.txt", b"x")).encode()
        + b'\n{"key":"deletedFolder","value":{"path":"secret.txt"}}',
        "preupload": b'{"files": [{"path": "pwned.txt", "size": 1}]}',
        "batch": b'{"operation":"upload","objects":[{"oid":"' + b"0" * 64 + b'","size":1}]}',
    }[kind]
    status, headers, answer = hub.request(method, path, body)
    assert status == 400 and headers["X-Error-Code"] == "BadRequest", answer
    assert _outside(tree) == before and (tree / "sibling" / "secret.txt").read_bytes() == SECRET


@pytest.mark.parametrize(
    "body",
    [
        {"name": "x", "organization": "../../x"},
        {"name": "../../x"},
        {"name": "a/b", "organization": "org"},
        {"name": "x", "organization": ".."},
        {"name": ".hidden"},
        {"name": "a--b"},
        {"name": "x", "organization": "org\\..\\.."},
        {"name": "x.git"},
        {"name": "n" * 120},
        {"name": 7},
        {"name": "x", "type": "../model"},
    ],
)
def test_create_repo_checks_every_id_part(hub, tree, body):
    before = _outside(tree), sorted(p.name for p in hub.root.iterdir())
    status, headers, answer = hub.request("POST", "/api/repos/create", json.dumps(body).encode())
    assert status == 400 and headers["X-Error-Code"] == "BadRequest", answer
    assert (_outside(tree), sorted(p.name for p in hub.root.iterdir())) == before


@pytest.mark.parametrize(
    "path", ["../../escape.txt", "/abs.txt", "a/../../escape.txt", "out/pwned.txt", "", "."]
)
def test_commit_file_paths_stay_inside_the_repo(hub, tree, path):
    before = _outside(tree)
    status, _, answer = hub.commit("org/repo", _file(path, b"x"))
    assert status == 400, answer
    assert _outside(tree) == before


@pytest.mark.parametrize(
    "op",
    [
        _file(".git/config", b"[core]\n\thooksPath = /tmp\n"),
        _file("sub/.GIT/hooks/post-checkout", b"#!/bin/sh\n"),
        {"key": "deletedFolder", "value": {"path": ".git/"}},
        {"key": "deletedFile", "value": {"path": ".git/HEAD"}},
    ],
    ids=["write config", "write hook, any case", "delete folder", "delete file"],
)
def test_a_commit_never_touches_a_clones_git_folder(hub, op):
    folder = _repo(hub, "clone-" + op["key"] + op["value"]["path"].replace("/", "-"))
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")

    def files() -> dict[str, bytes]:
        return {
            p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*")
            if p.is_file()
        }

    before = files()
    status, _, answer = hub.commit(f"sec/{folder.name}", op)  # with the write token
    assert status == 400 and ".git" in answer["error"], answer
    assert files() == before and ".git/HEAD" in before


def test_a_symlink_out_of_the_folder_is_not_served_one_inside_is(hub):
    status, _, listing = hub.request("GET", "/api/models/org/repo/tree/main")
    names = {e["path"] for e in listing}
    assert status == 200 and {"config.json", "alias.json"} <= names
    assert not names & {"leak.txt", "out", "out/secret.txt"}
    assert hub.request("GET", "/org/repo/resolve/main/leak.txt")[0] == 404
    assert hub.request("GET", "/org/repo/resolve/main/out/secret.txt")[0] == 404
    assert hub.request("GET", "/org/repo/resolve/main/alias.json")[2] == CONFIG


# -- commits change all or nothing ------------------------------------------------------------

BAD_TAILS = {
    "bad base64": _file("x.txt", b"") | {"value": {"path": "x.txt", "content": "!!not base64!!"}},
    "content missing": {"key": "file", "value": {"path": "x.txt"}},
    "content not a string": {"key": "file", "value": {"path": "x.txt", "content": 5}},
    "value not an object": {"key": "file", "value": "x.txt"},
    "operation not an object": ["file"],
    "unknown operation": {"key": "chmod", "value": {"path": "config.json"}},
    "lfs never uploaded": {"key": "lfsFile", "value": {"path": "w.bin", "oid": "a" * 64}},
    "bad lfs oid": {"key": "lfsFile", "value": {"path": "w.bin", "oid": "../x"}},
    "path escapes": _file("../../../escape.txt", b"x"),
}


@pytest.mark.parametrize("first", ["delete", "overwrite", "delete folder"])
@pytest.mark.parametrize("tail", sorted(BAD_TAILS))
def test_a_failed_commit_changes_nothing(hub, first, tail):
    folder = _repo(hub, f"atomic-{first.replace(' ', '-')}-{tail.replace(' ', '-')}")
    (folder / "sub").mkdir()
    (folder / "sub" / "a.txt").write_text("a")
    before = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*.*")}
    head = {
        "delete": {"key": "deletedFile", "value": {"path": "config.json"}},
        "overwrite": _file("config.json", b"{}"),
        "delete folder": {"key": "deletedFolder", "value": {"path": "sub/"}},
    }[first]
    status, headers, answer = hub.commit(f"sec/{folder.name}", head, BAD_TAILS[tail])
    assert status == 400 and headers["X-Error-Code"] == "BadRequest", answer
    after = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*.*")}
    assert after == before
    assert not [p.name for p in folder.parent.iterdir() if ".tmp-" in p.name]


def test_a_good_commit_applies_every_operation_at_once(hub):
    folder = _repo(hub, "good-commit")
    (folder / "stale.txt").write_text("old")
    (folder.parent / ".good-commit.tmp-left-by-a-kill").mkdir()  # a killed server's staging
    status, _, answer = hub.commit(
        "sec/good-commit",
        _file("config.json", b"{}"),
        _file("deep/new.txt", b"new"),
        {"key": "deletedFile", "value": {"path": "stale.txt"}},
    )
    assert status == 200 and answer["success"], answer
    files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert files == {"config.json", "deep/new.txt"}
    assert (folder / "config.json").read_bytes() == b"{}"
    assert not [p.name for p in folder.parent.iterdir() if ".tmp-" in p.name]


# -- who may write -----------------------------------------------------------------------------

WRITES = [
    ("POST", "/api/repos/create", b'{"name": "by-anyone", "organization": "sec"}'),
    ("POST", "/api/models/sec/token/commit/main", json.dumps(_file("a.txt", b"a")).encode()),
    ("POST", "/api/models/sec/token/preupload/main", b'{"files": []}'),
    ("POST", "/sec/token.git/info/lfs/objects/batch", b'{"objects": []}'),
]


@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong", "Bearer ", "Basic eDp5", "bearer {token}"]
)
@pytest.mark.parametrize("method,path,body", WRITES)
def test_writes_need_the_token_the_server_printed(hub, method, path, body, authorization):
    folder = hub.root / "sec" / "token"
    if not folder.exists():
        _repo(hub, "token")
    headers = {} if authorization is None else {"Authorization": authorization.format(**vars(hub))}
    status, response_headers, answer = hub.request(method, path, body, headers, token=False)
    assert status == 401 and response_headers["X-Error-Code"] == "Unauthorized", answer
    assert "HF_TOKEN" in answer["error"] and hub.token not in answer["error"]
    assert sorted(p.name for p in folder.iterdir()) == ["config.json"]
    assert not (hub.root / "sec" / "by-anyone").exists()


def test_an_lfs_upload_link_needs_the_servers_signature(hub):
    data = b"weights"
    oid = hashlib.sha256(data).hexdigest()
    assert hub.request("PUT", f"/_lfs/upload/{oid}", data)[0] == 401
    assert hub.request("PUT", f"/_lfs/upload/{oid}?sig=0000", data)[0] == 401
    body = json.dumps({"objects": [{"oid": oid, "size": len(data)}]}).encode()
    _repo(hub, "lfs")
    status, _, batch = hub.request("POST", "/sec/lfs.git/info/lfs/objects/batch", body)
    href = batch["objects"][0]["actions"]["upload"]["href"]
    assert status == 200 and "?sig=" in href
    assert hub.request("PUT", href.split(str(hub.port), 1)[1], data, token=False)[0] == 200


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example", "Content-Type": "text/plain"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1.evil.example"},
        {"Host": "evil.example"},
        {"Host": "rebind.example:8765"},
    ],
)
def test_requests_a_web_page_could_send_are_refused(hub, headers):
    folder = _repo(hub, f"origin-{abs(hash(json.dumps(headers))) % 10**8}")
    commit = hub.commit(f"sec/{folder.name}", _file("config.json", b"{}"), headers=headers)
    read = hub.request("GET", f"/sec/{folder.name}/resolve/main/config.json", headers=headers)
    assert commit[0] == read[0] == 403
    assert commit[1]["X-Error-Code"] in ("ForbiddenOrigin", "ForbiddenHost")
    assert (folder / "config.json").read_bytes() == CONFIG


def test_a_loopback_origin_with_the_token_may_write(hub):
    folder = _repo(hub, "loopback-origin")
    origin = {"Origin": f"http://127.0.0.1:{hub.port}"}
    assert hub.commit("sec/loopback-origin", _file("config.json", b"{}"), headers=origin)[0] == 200
    assert (folder / "config.json").read_bytes() == b"{}"


def test_read_only_refuses_every_write_and_prints_no_token(tree):
    server = _serve(tree, "--read-only")
    try:
        assert server.token is None
        folder = server.root / "sec" / "read-only"
        if not folder.exists():
            _repo(server, "read-only")
        for method, path, body in WRITES:
            path = path.replace("token", "read-only")
            status, headers, _ = server.request(method, path, body)
            assert status == 403 and headers["X-Error-Code"] == "ReadOnly"
        assert server.request("GET", "/sec/read-only/resolve/main/config.json")[2] == CONFIG
        assert sorted(p.name for p in folder.iterdir()) == ["config.json"]
    finally:
        assert "Traceback" not in _stop(server)


# -- malformed requests: always an answer, never a dropped connection --------------------------

MALFORMED = {
    "preupload files not a list": ("/api/models/org/repo/preupload/main", b'{"files": "x"}'),
    "preupload file not an object": ("/api/models/org/repo/preupload/main", b'{"files": [1]}'),
    "preupload size a string": (
        "/api/models/org/repo/preupload/main",
        b'{"files": [{"path": "a", "size": "9"}]}',
    ),
    "preupload not json": ("/api/models/org/repo/preupload/main", b"{not json"),
    "preupload 100k deep": ("/api/models/org/repo/preupload/main", b"[" * 100_000),
    "commit line not json": ("/api/models/org/repo/commit/main", b'{"key": "header"}\n{oops'),
    "commit 100k deep": ("/api/models/org/repo/commit/main", b'{"a":' * 100_000),
    "commit not utf-8": ("/api/models/org/repo/commit/main", b"\xff\xfe\xfa"),
    "batch objects not a list": ("/org/repo.git/info/lfs/objects/batch", b'{"objects": 3}'),
    "batch size missing": (
        "/org/repo.git/info/lfs/objects/batch",
        b'{"objects": [{"oid": "x"}]}',
    ),
    "create body a list": ("/api/repos/create", b"[]"),
    "paths-info paths not a list": ("/api/models/org/repo/paths-info/main", b'{"paths": 1}'),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_json_gets_a_400_in_the_hubs_error_shape(hub, case):
    path, body = MALFORMED[case]
    headers = {"Content-Type": "application/json"}
    status, response_headers, answer = hub.request("POST", path, body, headers)
    assert status == 400 and response_headers["X-Error-Code"] == "BadRequest", answer
    assert set(answer) == {"error"} and response_headers["X-Error-Message"]


def _head(method: str, path: str, *lines: str) -> bytes:
    return "\r\n".join([f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *lines, "", ""]).encode()


RAW = {
    "content-length not a number": (_head("POST", "/api/repos/create", "Content-Length: abc"), 400),
    "content-length negative": (_head("POST", "/api/repos/create", "Content-Length: -5"), 400),
    "content-length 1e12": (
        _head("POST", "/api/repos/create", "Content-Length: 1000000000000"),
        413,
    ),
    "bad chunk size": (
        _head("POST", "/api/repos/create", "Transfer-Encoding: chunked") + b"zz\r\n{}\r\n0\r\n\r\n",
        400,
    ),
    "unknown method": (_head("OPTIONS", "/api/models/org/repo"), 405),
    "bad range": (_head("GET", "/org/repo/resolve/main/config.json", "Range: bytes=x-y"), 416),
    "garbage request line": (b"\x16\x03\x01 not http\r\n\r\n", 400),
    "http/2 preface": (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400),
}


@pytest.mark.parametrize("case", sorted(RAW))
def test_malformed_http_gets_a_4xx_json_answer(hub, case):
    data, expected = RAW[case]
    answer = hub.raw(data)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == str(expected).encode(), answer[:300]
    assert "error" in json.loads(body)


def test_a_body_shorter_than_its_length_times_out_with_408(hub):
    started = time.monotonic()
    data = _head("POST", "/api/repos/create", "Content-Length: 100") + b'{"name":'
    answer = hub.raw(data, wait=20)
    assert answer.split(b" ")[1] == b"408" and time.monotonic() - started < 15


def test_a_client_that_sends_nothing_is_dropped_after_the_read_timeout(hub):
    with socket.create_connection(("127.0.0.1", hub.port), timeout=20) as s:
        started = time.monotonic()
        s.sendall(b"GET /api/models/org/repo HTTP/1.1\r\n")  # and never ends the head
        assert s.recv(65536) == b"" and time.monotonic() - started < 15


def test_the_server_still_answers_after_every_malformed_request(hub):
    status, _, info = hub.request("GET", "/api/models/org/repo")
    assert status == 200 and info["id"] == "org/repo"
