"""The HTTP side of the loopback Hub: routes every request huggingface_hub, transformers and
datasets send (measured in shared/docs/environment.md §2) to the `RepoStore`.

Every response carries an exact Content-Length, so HTTP/1.1 keep-alive works, and every error
carries the `X-Error-Code` that `huggingface_hub.utils.hf_raise_for_status` maps to its classes.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tinykit.hub.server.log import RequestRecord
from tinykit.hub.server.store import URL_PREFIX, HubNotFound, Snapshot, is_lfs

if TYPE_CHECKING:
    from tinykit.hub.server import HubServer

_PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space"}
_PREFIX = {"datasets": "dataset", "spaces": "space"}


class _Route:
    """What a URL path names; filled in by `HubHandler._route`."""

    kind = "other"
    repo_type = ""
    repo_id = ""
    revision = ""  # "" where the URL names none: the handlers read it as "main"
    filename = ""
    action = ""
    tree_path = ""
    oid = ""  # LFS object id, for /_lfs/ upload and verify


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tinykit-hub"
    hub: HubServer  # set on the subclass made per server

    # -- plumbing --------------------------------------------------------------------------

    def log_message(self, format: str, *args: object) -> None:  # the RequestLog replaces it
        pass

    def do_GET(self) -> None:
        self._dispatch()

    do_HEAD = do_POST = do_PUT = do_DELETE = do_GET

    def _dispatch(self) -> None:
        self._body = self._read_body()
        url = urlsplit(self.path)
        self._query = parse_qs(url.query)
        segments = [unquote(s) for s in url.path.split("/")[1:]]
        route = self._r = self._route(segments)
        try:
            fault = self.hub.faults.apply(self.command, unquote(url.path))
            if fault is not None and fault.status is not None:  # apply() returns failing ones only
                self._error(fault.status, fault.error_code, f"injected fault for {url.path}")
            else:
                self._handle(route)
        except HubNotFound as e:
            headers = {"X-Repo-Commit": e.commit} if e.commit else {}
            self._error(404, e.code, e.message, headers)
        except (ValueError, KeyError) as e:
            self._error(400, "BadRequest", f"bad request: {e}")

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send(
        self, status: int, body: bytes = b"", headers: dict | None = None, length: int | None = None
    ) -> None:
        # Logged before the first byte goes out: once a client has its answer, the log has it.
        r = self._r
        self.hub.log.append(
            RequestRecord(
                self.command,
                self.path,
                status,
                r.kind,
                r.repo_type or None,  # the log says None for what the URL does not name
                r.repo_id or None,
                r.revision or None,
                r.filename or None,
                self.headers.get("Range"),
            )
        )
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, data: object, status: int = 200, headers: dict | None = None) -> None:
        body = json.dumps(data).encode()
        self._send(status, body, {"Content-Type": "application/json", **(headers or {})})

    def _error(
        self, status: int, code: str | None, message: str, headers: dict | None = None
    ) -> None:
        extra = {"X-Error-Message": message, **(headers or {})}
        if code:
            extra["X-Error-Code"] = code
        self._json({"error": message}, status, extra)

    # -- routing ---------------------------------------------------------------------------

    def _route(self, seg: list[str]) -> _Route:
        r = _Route()
        if seg[:1] == ["api"] and len(seg) >= 4 and seg[1] in _PLURAL:
            r.kind, r.repo_type, r.repo_id = "api", _PLURAL[seg[1]], f"{seg[2]}/{seg[3]}"
            r.action = seg[4] if len(seg) > 4 else "info"
            r.revision = seg[5] if len(seg) > 5 else ("main" if r.action == "info" else "")
            if r.action == "tree":
                r.tree_path = "/".join(seg[6:]).strip("/")
            return r
        if seg[:1] == ["api"]:
            r.kind, r.action = "api", "/".join(seg[1:])
            return r
        if seg[:1] == ["_cdn"] and len(seg) >= 6:  # /_cdn/{type}s/{org}/{name}/{sha}/{path}
            r.kind, r.repo_type, r.repo_id = "cdn", _PLURAL.get(seg[1], ""), f"{seg[2]}/{seg[3]}"
            r.revision, r.filename = seg[4], "/".join(seg[5:])
            return r
        if seg[:1] == ["_lfs"] and len(seg) == 3:  # /_lfs/{upload|verify}/{oid}
            r.kind, r.action, r.oid = "lfs", seg[1], seg[2]
            return r
        repo_type = _PREFIX.get(seg[0], "model") if seg else "model"
        rest = seg[1:] if repo_type != "model" else seg
        if len(rest) >= 5 and rest[2] == "resolve":
            r.kind, r.repo_type, r.repo_id = "resolve", repo_type, f"{rest[0]}/{rest[1]}"
            r.revision, r.filename = rest[3], "/".join(rest[4:])
        elif (
            len(rest) >= 3
            and rest[1].endswith(".git")
            and rest[2:] == ["info", "lfs", "objects", "batch"]
        ):
            r.kind, r.action, r.repo_type = "lfs", "batch", repo_type
            r.repo_id = f"{rest[0]}/{rest[1][: -len('.git')]}"
        return r

    def _handle(self, r: _Route) -> None:
        store = self.hub.store
        if r.kind == "resolve":
            return self._resolve(store.snapshot(r.repo_type, r.repo_id, r.revision), r.filename)
        if r.kind == "cdn":
            return self._send_file(store.snapshot(r.repo_type, r.repo_id, r.revision), r.filename)
        if r.kind == "lfs":
            return self._lfs(r)
        if r.kind == "api" and r.repo_id:
            return self._repo_api(r)
        if r.kind == "api":
            return self._misc_api(r.action)
        self._error(404, None, f"no such endpoint: {self.command} {self.path}")

    # -- files -----------------------------------------------------------------------------

    def _resolve(self, snap: Snapshot, filename: str) -> None:
        if snap.gated and not self.hub.store.gate_allows(
            snap.repo_type, snap.repo_id, self.headers.get("Authorization")
        ):
            kind = snap.repo_type.capitalize()
            message = (
                f"Access to {snap.repo_type} {snap.repo_id} is restricted. You must have access"
                " to it and be authenticated to access it. Please log in."
            )
            return self._error(
                401, "GatedRepo", message, {"X-Repo-Commit": snap.sha, "X-Kind": kind}
            )
        entry = self._entry(snap, filename)
        if entry.sha256:  # LFS file: metadata on the redirect itself, bytes from the other origin
            path = f"/_cdn/{snap.repo_type}s/{snap.repo_id}/{snap.sha}/{quote(filename)}"
            return self._send(
                302,
                headers={
                    "Location": self.hub.cdn_endpoint + path,
                    "X-Repo-Commit": snap.sha,
                    "ETag": f'"{entry.sha256}"',
                    "X-Linked-Etag": f'"{entry.sha256}"',
                    "X-Linked-Size": str(entry.size),
                },
            )
        self._send_file(snap, filename)

    def _entry(self, snap: Snapshot, filename: str):
        entry = snap.files.get(filename)
        if entry is None:
            raise HubNotFound(
                "EntryNotFound", f"{filename} does not exist on {snap.revision!r}", snap.sha
            )
        return entry

    def _send_file(self, snap: Snapshot, filename: str) -> None:
        entry = self._entry(snap, filename)
        start, end, status = 0, entry.size - 1, 200
        headers = {
            "X-Repo-Commit": snap.sha,
            "ETag": f'"{entry.sha256 or entry.blob_id}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
        }
        if entry.sha256:
            headers["X-Linked-Etag"], headers["X-Linked-Size"] = headers["ETag"], str(entry.size)
        byte_range = self.headers.get("Range", "")
        if byte_range.startswith("bytes=") and entry.size:
            first, _, last = byte_range[6:].split(",")[0].partition("-")
            if first:
                start, end = int(first), min(int(last) if last else end, end)
            else:  # suffix range: the last N bytes
                start = max(entry.size - int(last), 0)
            if start > end:
                return self._send(416, headers={"Content-Range": f"bytes */{entry.size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{entry.size}"
        self._send(status, headers=headers, length=end - start + 1 if entry.size else 0)
        if self.command == "GET":
            with open(entry.local, "rb") as f:
                f.seek(start)
                _copy_n(f, self.wfile, end - start + 1)

    # -- /api/{type}s/{org}/{name}/... -----------------------------------------------------

    def _repo_api(self, r: _Route) -> None:
        store, action = self.hub.store, r.action
        if action == "preupload":
            return self._preupload(store.snapshot(r.repo_type, r.repo_id, r.revision))
        if action == "commit":
            return self._commit(r)
        if action == "xet-write-token" or action == "xet-read-token":
            return self._error(
                501, None, "tinykit's loopback Hub does not speak Xet: set HF_HUB_DISABLE_XET=1"
            )
        if action == "refs":
            snap = store.snapshot(r.repo_type, r.repo_id, "main")
            branch = {"name": "main", "ref": "refs/heads/main", "targetCommit": snap.sha}
            return self._json({"branches": [branch], "converts": [], "tags": []})
        snap = store.snapshot(r.repo_type, r.repo_id, r.revision or "main")
        if action in ("info", "revision"):
            return self._json(self._info(snap))
        if action == "tree":
            return self._json(snap.tree(r.tree_path, recursive=_flag(self._query, "recursive")))
        if action == "paths-info":
            paths = parse_qs(self._body.decode()).get("paths", [])
            if self.headers.get("Content-Type", "").startswith("application/json"):
                paths = json.loads(self._body or b"{}").get("paths", [])
            return self._json([e for p in paths if (e := snap.path_info(p))])
        self._error(404, None, f"no such repo endpoint: {action}")

    def _info(self, snap: Snapshot) -> dict:
        return {
            "_id": snap.sha[:24],
            "id": snap.repo_id,
            "sha": snap.sha,
            "private": False,
            "disabled": False,
            "gated": "manual" if snap.gated else False,
            "tags": [],
            "downloads": 0,
            "likes": 0,
            "cardData": {},
            "lastModified": "2024-01-01T00:00:00.000Z",
            "createdAt": "2024-01-01T00:00:00.000Z",
            "siblings": [e.sibling_json() for e in snap.files.values()],
        }

    def _preupload(self, snap: Snapshot) -> None:
        files = json.loads(self._body)["files"]
        answer = []
        for f in files:
            existing = snap.files.get(f["path"])
            answer.append(
                {
                    "path": f["path"],
                    "uploadMode": "lfs" if is_lfs(f["path"], int(f.get("size", 0))) else "regular",
                    "shouldIgnore": False,
                    "oid": existing.blob_id if existing else None,
                }
            )
        self._json({"files": answer, "commitOid": snap.sha})

    def _commit(self, r: _Route) -> None:
        lines = [json.loads(line) for line in self._body.decode().splitlines() if line.strip()]
        operations = [line for line in lines if line.get("key") != "header"]
        snap = self.hub.store.commit(r.repo_type, r.repo_id, r.revision or "main", operations)
        url = f"{self.hub.endpoint}/{URL_PREFIX[snap.repo_type]}{snap.repo_id}/commit/{snap.sha}"
        self._json(
            {"commitOid": snap.sha, "commitUrl": url, "pullRequestUrl": None, "success": True}
        )

    # -- LFS uploads (datasets pushes need them: environment.md §2.8) ------------------------

    def _lfs(self, r: _Route) -> None:
        store = self.hub.store
        if r.action == "batch":
            if not store.exists(r.repo_type, r.repo_id):
                raise HubNotFound("RepoNotFound", f"Repository {r.repo_id!r} not found.")
            objects = []
            for obj in json.loads(self._body)["objects"]:
                item = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
                if not store.lfs_object(obj["oid"]).exists():
                    item["actions"] = {
                        "upload": {"href": f"{self.hub.endpoint}/_lfs/upload/{obj['oid']}"},
                        "verify": {"href": f"{self.hub.endpoint}/_lfs/verify/{obj['oid']}"},
                    }
                objects.append(item)
            return self._json({"transfer": "basic", "objects": objects})
        if r.action == "upload" and self.command == "PUT":
            store.store_lfs_object(r.oid, self._body)
            return self._send(200)
        if r.action == "verify":
            if not store.lfs_object(r.oid).exists():
                return self._error(404, None, f"LFS object {r.oid} was not uploaded")
            return self._json({"success": True})
        self._error(404, None, f"no such LFS endpoint: {self.command} {self.path}")

    # -- everything else ---------------------------------------------------------------------

    def _misc_api(self, action: str) -> None:
        if action == "repos/create" and self.command == "POST":
            return self._create_repo()
        if action == "validate-yaml":
            return self._json({"errors": [], "warnings": []})
        if action == "whoami-v2":
            return self._json(
                {
                    "type": "user",
                    "name": "tinykit",
                    "fullname": "tinykit loopback Hub",
                    "orgs": [],
                    "auth": {
                        "type": "access_token",
                        "accessToken": {"displayName": "tinykit", "role": "write"},
                    },
                }
            )
        self._error(404, None, f"no such endpoint: /api/{action}")

    def _create_repo(self) -> None:
        body = json.loads(self._body or b"{}")
        repo_type = body.get("type") or "model"
        if repo_type not in URL_PREFIX:
            raise ValueError(f"unknown repo type {repo_type!r}")
        name, org = body["name"], body.get("organization") or "tinykit"
        repo_id = f"{org}/{name}"
        url = f"{self.hub.endpoint}/{URL_PREFIX[repo_type]}{repo_id}"
        if self.hub.store.create(repo_type, repo_id):
            return self._json({"url": url, "name": repo_id})
        # create_repo(exist_ok=True) swallows the 409 but still reads body["url"]
        self._json({"url": url, "error": "You already created this repo"}, 409)


def _flag(query: dict, name: str) -> bool:
    return query.get(name, ["false"])[0].lower() in ("1", "true")


def _copy_n(src, dst, n: int) -> None:
    while n > 0:
        chunk = src.read(min(n, 1 << 20))
        if not chunk:
            break
        dst.write(chunk)
        n -= len(chunk)
