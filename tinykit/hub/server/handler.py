"""The HTTP side of the loopback Hub: routes every request huggingface_hub, transformers and
datasets send (measured in shared/docs/environment.md §2) to the `RepoStore`.

Every response carries an exact Content-Length, so HTTP/1.1 keep-alive works, and every error
carries the `X-Error-Code` that `huggingface_hub.utils.hf_raise_for_status` maps to its classes.
Nothing a client sends drops the connection unanswered: malformed requests get a 4xx JSON error
(`guard.Refused`), and a bug in here a 500 one.
"""

from __future__ import annotations

import contextlib
import hmac
import json
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tinykit.hub.server import guard
from tinykit.hub.server.guard import Refused, bad_request, field, parse_json
from tinykit.hub.server.log import RequestRecord
from tinykit.hub.server.store import URL_PREFIX, HubNotFound, Snapshot, is_lfs

if TYPE_CHECKING:
    from tinykit.hub.server import HubServer

_PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space"}
_PREFIX = {"datasets": "dataset", "spaces": "space"}
_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE")


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

    do_HEAD = do_POST = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = do_GET

    def _dispatch(self) -> None:
        self._r = _Route()
        self._body = b""
        url = urlsplit(self.path)
        try:
            guard.check_origin(self.headers)
            if self.command not in _METHODS:
                raise Refused(405, f"method {self.command} is not served", "MethodNotAllowed")
            self._body = guard.read_body(self.rfile, self.headers, self.hub.max_body)  # type: ignore[arg-type]  # rfile is a BinaryIO at runtime
            self._query = parse_qs(url.query)
            route = self._r = self._route([unquote(s) for s in url.path.split("/")[1:]])
            if self._is_write(route):
                guard.check_write(
                    self.headers.get("Authorization"), self.hub.token, self.hub.read_only
                )
            fault = self.hub.faults.apply(self.command, unquote(url.path))
            if fault is not None and fault.status is not None:  # apply() returns failing ones only
                self._error(fault.status, fault.error_code, f"injected fault for {url.path}")
            else:
                self._handle(route)
        except HubNotFound as e:
            headers = {"X-Repo-Commit": e.commit} if e.commit else {}
            self._error(404, e.code, e.message, headers)
        except Refused as e:
            self.close_connection = True  # the body may be unread: the stream is out of step
            self._error(e.status, e.code, e.message)
        except TimeoutError:
            self.close_connection = True
            self._error(408, "RequestTimeout", f"no data for {self.timeout} s: request dropped")
        except (ConnectionError, BrokenPipeError):
            self.close_connection = True
        except Exception as e:  # a server bug: answer it, never drop the connection
            self.close_connection = True
            self._error(500, "InternalError", f"loopback Hub bug: {type(e).__name__}: {e}")

    def _is_write(self, r: _Route) -> bool:
        if r.kind == "lfs":
            return r.action == "batch"  # upload/verify hrefs carry a signature from the batch
        if r.kind == "api" and r.repo_id:
            return r.action in ("commit", "preupload")
        return r.kind == "api" and self.command == "POST" and r.action == "repos/create"

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        """Errors found by http.server itself (bad request line, too long a header): JSON too."""
        if not hasattr(self, "_r"):
            self._r = _Route()
        self.close_connection = True
        self.request_version = "HTTP/1.0"  # else an unparsed line counts as HTTP/0.9: no headers
        text = message or HTTPStatus(code).phrase
        if code >= 500:  # e.g. 505 HTTP Version Not Supported: still the client's fault
            code = 400
        with contextlib.suppress(ConnectionError, TimeoutError):
            self._error(code, "BadRequest", text)

    def _send(
        self, status: int, body: bytes = b"", headers: dict | None = None, length: int | None = None
    ) -> None:
        # Logged before the first byte goes out: once a client has its answer, the log has it.
        r = self._r
        self.hub.log.append(
            RequestRecord(
                self.command or "-",
                getattr(self, "path", "-"),
                status,
                r.kind,
                r.repo_type or None,  # the log says None for what the URL does not name
                r.repo_id or None,
                r.revision or None,
                r.filename or None,
                self.headers.get("Range") if getattr(self, "headers", None) else None,
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
        message = " ".join(message.split())[:500]  # one header line, whatever the input held
        extra = {"X-Error-Message": message.encode("ascii", "replace").decode(), **(headers or {})}
        if code:
            extra["X-Error-Code"] = code
        self._json({"error": message}, status, extra)

    # -- routing ---------------------------------------------------------------------------

    def _route(self, seg: list[str]) -> _Route:
        """What the path names; every repo id in it is checked (no `..`, `/`, ... parts)."""
        r = _Route()
        if seg[:1] == ["api"] and len(seg) >= 4 and seg[1] in _PLURAL:
            r.kind, r.repo_type, r.repo_id = "api", _PLURAL[seg[1]], guard.check_repo_id(*seg[2:4])
            r.action = seg[4] if len(seg) > 4 else "info"
            r.revision = seg[5] if len(seg) > 5 else ("main" if r.action == "info" else "")
            if r.action == "tree":
                r.tree_path = "/".join(seg[6:]).strip("/")
            return r
        if seg[:1] == ["api"]:
            r.kind, r.action = "api", "/".join(seg[1:])
            return r
        if seg[:1] == ["_cdn"] and len(seg) >= 6:  # /_cdn/{type}s/{org}/{name}/{sha}/{path}
            r.kind, r.repo_type, r.repo_id = (
                "cdn",
                _PLURAL.get(seg[1], ""),
                guard.check_repo_id(*seg[2:4]),
            )
            if not r.repo_type:
                raise bad_request(f"unknown repo type {seg[1]!r}")
            r.revision, r.filename = seg[4], "/".join(seg[5:])
            return r
        if seg[:1] == ["_lfs"] and len(seg) == 3:  # /_lfs/{upload|verify}/{oid}
            r.kind, r.action, r.oid = "lfs", seg[1], seg[2]
            return r
        repo_type = _PREFIX.get(seg[0], "model") if seg else "model"
        rest = seg[1:] if repo_type != "model" else seg
        if len(rest) >= 5 and rest[2] == "resolve":
            r.kind, r.repo_type, r.repo_id = "resolve", repo_type, guard.check_repo_id(*rest[:2])
            r.revision, r.filename = rest[3], "/".join(rest[4:])
        elif (
            len(rest) >= 3
            and rest[1].endswith(".git")
            and rest[2:] == ["info", "lfs", "objects", "batch"]
        ):
            r.kind, r.action, r.repo_type = "lfs", "batch", repo_type
            r.repo_id = guard.check_repo_id(rest[0], rest[1][: -len(".git")])
        return r

    def _handle(self, r: _Route) -> None:
        store = self.hub.store
        if r.kind == "resolve":
            return self._resolve(store.snapshot(r.repo_type, r.repo_id, r.revision), r.filename)
        if r.kind == "cdn":
            return self._send_file(self._cdn_snapshot(r), r.filename)
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
            path += f"?oid={entry.sha256}"
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

    def _cdn_snapshot(self, r: _Route) -> Snapshot:
        """The snapshot a CDN link was made from. A commit in between changes the sha (it is
        derived from the content), so a link whose file is unchanged (same sha256) still works."""
        store = self.hub.store
        try:
            return store.snapshot(r.repo_type, r.repo_id, r.revision)
        except HubNotFound as e:
            if e.code != "RevisionNotFound":
                raise
            snap = store.snapshot(r.repo_type, r.repo_id, "main")
            entry = snap.files.get(r.filename or "")
            if entry is None or entry.sha256 != self._query.get("oid", [""])[0]:
                raise
            return snap

    def _entry(self, snap: Snapshot, filename: str):
        entry = snap.files.get(filename)
        if entry is None:
            raise HubNotFound(
                "EntryNotFound", f"{filename} does not exist on {snap.revision!r}", snap.sha
            )
        return entry

    def _send_file(self, snap: Snapshot, filename: str) -> None:
        with self.hub.store.current(snap) as snap:
            entry = self._entry(snap, filename)
            oid = self._query.get("oid", [None])[0]  # a CDN link names the content it serves
            try:
                if oid is not None and entry.sha256 != oid:
                    raise OSError
                f = open(entry.local, "rb")  # noqa: SIM115 (the with block below closes it)
            except OSError:
                raise HubNotFound(
                    "EntryNotFound", f"{filename} changed while it was read"
                ) from None
        with f:
            self._send_open_file(f, snap, entry)

    def _send_open_file(self, f, snap: Snapshot, entry) -> None:
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
            first, _, last = byte_range[6:].split(",")[0].strip().partition("-")
            if not (first or last) or not all(x.isdigit() for x in (first, last) if x):
                raise Refused(416, f"unreadable Range {byte_range[:60]!r}", "RangeNotSatisfiable")
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
            if self.headers.get("Content-Type", "").startswith("application/json"):
                paths = field(parse_json(self._body, {}), "paths", list, [])
            else:
                paths = parse_qs(self._body.decode("utf-8", "replace")).get("paths", [])
            if not all(isinstance(p, str) for p in paths):
                raise bad_request("'paths' must be a list of strings")
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
        files = field(parse_json(self._body), "files", list)
        answer = []
        for f in files:
            path, size = field(f, "path", str), field(f, "size", int, 0)
            existing = snap.files.get(path)
            answer.append(
                {
                    "path": path,
                    "uploadMode": "lfs" if is_lfs(path, size) else "regular",
                    "shouldIgnore": False,
                    "oid": existing.blob_id if existing else None,
                }
            )
        self._json({"files": answer, "commitOid": snap.sha})

    def _commit(self, r: _Route) -> None:
        try:
            text = self._body.decode()
        except UnicodeDecodeError:
            raise bad_request("commit body is not UTF-8 ndjson") from None
        lines = [parse_json(line.encode()) for line in text.splitlines() if line.strip()]
        operations: list[Any] = [  # non-dict lines are refused by the store
            line for line in lines if not isinstance(line, dict) or line.get("key") != "header"
        ]
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
            for obj in field(parse_json(self._body), "objects", list):
                oid, size = field(obj, "oid", str), field(obj, "size", int)
                item = {"oid": oid, "size": size, "authenticated": True}
                if not store.lfs_object(oid).exists():
                    sig = guard.upload_signature(self.hub.token, oid)
                    item["actions"] = {
                        "upload": {"href": f"{self.hub.endpoint}/_lfs/upload/{oid}?sig={sig}"},
                        "verify": {"href": f"{self.hub.endpoint}/_lfs/verify/{oid}?sig={sig}"},
                    }
                objects.append(item)
            return self._json({"transfer": "basic", "objects": objects})
        if r.action in ("upload", "verify"):
            sig = self._query.get("sig", [""])[0]
            guard.check_write(None, None, self.hub.read_only)
            if not hmac.compare_digest(sig, guard.upload_signature(self.hub.token, r.oid)):
                raise Refused(401, "LFS upload link is not signed by this server", "Unauthorized")
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
        body = parse_json(self._body, {})
        repo_type = field(body, "type", (str, type(None)), None) or "model"
        if repo_type not in URL_PREFIX:
            raise bad_request(f"unknown repo type {repo_type[:40]!r}")
        name = field(body, "name", str)
        org = field(body, "organization", (str, type(None)), None) or "tinykit"
        repo_id = guard.check_repo_id(org, name)
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
