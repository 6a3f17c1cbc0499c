"""The HTTP side of the loopback Hub: every request huggingface_hub, transformers and datasets
send (measured in shared/docs/environment.md §2), routed by one table (`ROUTES`) to the
`RepoStore`. A new endpoint is one row: methods, URL template, handler, and whether it writes.

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

from tinykit.errors import HubNotFound, Refused
from tinykit.hub.layout import URL_PREFIX
from tinykit.hub.server import guard
from tinykit.hub.server.guard import bad_request, field, parse_json
from tinykit.hub.server.log import RequestRecord
from tinykit.hub.server.routes import Route, Target, find_route
from tinykit.hub.server.store import Snapshot, is_lfs

if TYPE_CHECKING:
    from tinykit.hub.server import HubServer

_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE")


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
        self._target = Target()
        self._body = b""
        url = urlsplit(self.path)
        try:
            guard.check_origin(self.headers)
            if self.command not in _METHODS:
                raise Refused(405, f"method {self.command} is not served", "MethodNotAllowed")
            self._body = guard.read_body(self.rfile, self.headers, self.hub.max_body)  # type: ignore[arg-type]  # rfile is a BinaryIO at runtime
            self._query = parse_qs(url.query)
            route, got = find_route(ROUTES, self.command, url.path) or (NO_ROUTE, {})
            self._target = route.target(got)  # a 400 for a bad repo id, before any other check
            if route.writes:
                guard.check_write(
                    self.headers.get("Authorization"), self.hub.token, self.hub.read_only
                )
            fault = self.hub.faults.apply(self.command, unquote(url.path))
            if fault is not None and fault.status is not None:  # apply() returns failing ones only
                self._error(fault.status, fault.error_code, f"injected fault for {url.path}")
            else:
                route.handler(self, self._target)
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

    def _no_such_endpoint(self, t: Target) -> None:
        self._error(404, None, f"no such endpoint: {self.command} {self.path}")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None):
        """Errors found by http.server itself (bad request line, too long a header): JSON too."""
        if not hasattr(self, "_target"):
            self._target = Target()
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
        r = self._target
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

    # -- files -----------------------------------------------------------------------------

    def _resolve(self, t: Target) -> None:
        snap, filename = self.hub.store.snapshot(t.repo_type, t.repo_id, t.revision), t.filename
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

    def _cdn(self, t: Target) -> None:
        self._send_file(self._cdn_snapshot(t), t.filename)

    def _cdn_snapshot(self, t: Target) -> Snapshot:
        """The snapshot a CDN link was made from. A commit in between changes the sha (it is
        derived from the content), so a link whose file is unchanged (same sha256) still works."""
        store = self.hub.store
        try:
            return store.snapshot(t.repo_type, t.repo_id, t.revision)
        except HubNotFound as e:
            if e.code != "RevisionNotFound":
                raise
            snap = store.snapshot(t.repo_type, t.repo_id, "main")
            entry = snap.files.get(t.filename)
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

    def _snapshot(self, t: Target) -> Snapshot:
        return self.hub.store.snapshot(t.repo_type, t.repo_id, t.revision or "main")

    def _repo_info(self, t: Target) -> None:
        self._json(self._info(self._snapshot(t)))

    def _tree(self, t: Target) -> None:
        recursive = _flag(self._query, "recursive")
        self._json(self._snapshot(t).tree(t.path.strip("/"), recursive=recursive))

    def _paths_info(self, t: Target) -> None:
        snap = self._snapshot(t)
        if self.headers.get("Content-Type", "").startswith("application/json"):
            paths = field(parse_json(self._body, {}), "paths", list, [])
        else:
            paths = parse_qs(self._body.decode("utf-8", "replace")).get("paths", [])
        if not all(isinstance(p, str) for p in paths):
            raise bad_request("'paths' must be a list of strings")
        self._json([e for p in paths if (e := snap.path_info(p))])

    def _refs(self, t: Target) -> None:
        snap = self.hub.store.snapshot(t.repo_type, t.repo_id, "main")
        branch = {"name": "main", "ref": "refs/heads/main", "targetCommit": snap.sha}
        self._json({"branches": [branch], "converts": [], "tags": []})

    def _no_xet(self, t: Target) -> None:
        self._error(
            501, None, "tinykit's loopback Hub does not speak Xet: set HF_HUB_DISABLE_XET=1"
        )

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

    def _preupload(self, t: Target) -> None:
        snap = self.hub.store.snapshot(t.repo_type, t.repo_id, t.revision)
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

    def _commit(self, t: Target) -> None:
        try:
            text = self._body.decode()
        except UnicodeDecodeError:
            raise bad_request("commit body is not UTF-8 ndjson") from None
        lines = [parse_json(line.encode()) for line in text.splitlines() if line.strip()]
        operations: list[Any] = [  # non-dict lines are refused by the store
            line for line in lines if not isinstance(line, dict) or line.get("key") != "header"
        ]
        snap = self.hub.store.commit(t.repo_type, t.repo_id, t.revision or "main", operations)
        url = f"{self.hub.endpoint}/{URL_PREFIX[snap.repo_type]}{snap.repo_id}/commit/{snap.sha}"
        self._json(
            {"commitOid": snap.sha, "commitUrl": url, "pullRequestUrl": None, "success": True}
        )

    # -- LFS uploads (datasets pushes need them: environment.md §2.8) ------------------------

    def _lfs_batch(self, t: Target) -> None:
        store = self.hub.store
        if not store.exists(t.repo_type, t.repo_id):
            raise HubNotFound("RepoNotFound", f"Repository {t.repo_id!r} not found.")
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
        self._json({"transfer": "basic", "objects": objects})

    def _check_lfs_link(self, t: Target) -> None:
        """Upload and verify links carry the signature the token-checked batch call gave out."""
        sig = self._query.get("sig", [""])[0]
        guard.check_write(None, None, self.hub.read_only)
        if not hmac.compare_digest(sig, guard.upload_signature(self.hub.token, t.oid)):
            raise Refused(401, "LFS upload link is not signed by this server", "Unauthorized")

    def _lfs_upload(self, t: Target) -> None:
        self._check_lfs_link(t)
        self.hub.store.store_lfs_object(t.oid, self._body)
        self._send(200)

    def _lfs_verify(self, t: Target) -> None:
        self._check_lfs_link(t)
        if not self.hub.store.lfs_object(t.oid).exists():
            return self._error(404, None, f"LFS object {t.oid} was not uploaded")
        self._json({"success": True})

    # -- repos and users ---------------------------------------------------------------------

    def _validate_yaml(self, t: Target) -> None:
        self._json({"errors": [], "warnings": []})

    def _whoami(self, t: Target) -> None:
        self._json(
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

    def _create_repo(self, t: Target) -> None:
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


H = HubHandler  # (short, so that a row fits a line)
ROUTES: tuple[Route, ...] = (
    # files: metadata (HEAD) and bytes; an LFS file redirects to the CDN origin
    Route("GET HEAD", "{type?}/{org}/{name}/resolve/{rev}/{file+}", H._resolve, "resolve"),
    Route("GET HEAD", "_cdn/{types}/{org}/{name}/{rev}/{file+}", H._cdn, "cdn"),
    # one repo
    Route("GET HEAD", "api/{types}/{org}/{name}", H._repo_info, "api"),
    Route("GET HEAD", "api/{types}/{org}/{name}/revision/{rev}", H._repo_info, "api"),
    Route("GET HEAD", "api/{types}/{org}/{name}/tree/{rev}/{path*}", H._tree, "api"),
    Route("POST", "api/{types}/{org}/{name}/paths-info/{rev}", H._paths_info, "api"),
    Route("GET HEAD", "api/{types}/{org}/{name}/refs", H._refs, "api"),
    Route("GET", "api/{types}/{org}/{name}/xet-read-token/{rev*}", H._no_xet, "api"),
    Route("GET", "api/{types}/{org}/{name}/xet-write-token/{rev*}", H._no_xet, "api"),
    Route("POST", "api/{types}/{org}/{name}/preupload/{rev}", H._preupload, "api", writes=True),
    Route("POST", "api/{types}/{org}/{name}/commit/{rev}", H._commit, "api", writes=True),
    # LFS uploads (datasets pushes need them): the token-checked batch call hands out signed links
    Route(
        "POST", "{type?}/{org}/{name}.git/info/lfs/objects/batch", H._lfs_batch, "lfs", writes=True
    ),
    Route("PUT", "_lfs/upload/{oid}", H._lfs_upload, "lfs"),
    Route("POST", "_lfs/verify/{oid}", H._lfs_verify, "lfs"),
    # repos and users
    Route("POST", "api/repos/create", H._create_repo, "api", writes=True),
    Route("POST", "api/validate-yaml", H._validate_yaml, "api"),
    Route("GET", "api/whoami-v2", H._whoami, "api"),
)
"""Every endpoint the loopback Hub answers, tried in order; anything else is a 404."""

NO_ROUTE = Route("", "", H._no_such_endpoint, "other")
