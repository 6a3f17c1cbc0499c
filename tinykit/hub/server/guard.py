"""What the loopback Hub refuses before it touches a repo: bad ids and paths, oversized or
malformed bodies, writes without the server's token, and requests sent by web pages.

Every refusal is a `Refused` (tinykit.errors) carrying the HTTP status and the Hub's `X-Error-Code`, so the
handler answers it in the Hub's error shape instead of dropping the connection.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import BinaryIO
from urllib.parse import urlsplit

from tinykit.errors import Refused

# huggingface_hub's validate_repo_id, per part: word characters, '-', '.', starting and ending
# with a word character, no '--' or '..', at most 96 characters for the whole id.
_REPO_PART = re.compile(r"\w(?:[\w.-]*\w)?")
MAX_REPO_ID = 96
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})
_CHUNK = 1 << 20


def bad_request(message: str) -> Refused:
    return Refused(400, message, "BadRequest")


def check_repo_part(part: object, what: str = "repo id part") -> str:
    if (
        not isinstance(part, str)
        or not _REPO_PART.fullmatch(part)
        or ".." in part
        or "--" in part
        or part.endswith(".git")
    ):
        raise bad_request(
            f"invalid {what} {part!r}: use letters, digits, '-', '_' and '.' "
            "(no '..', '--', '/', or a leading/trailing '.' or '-')"
        )
    return part


def check_repo_id(org: object, name: object) -> str:
    repo_id = f"{check_repo_part(org, 'organization')}/{check_repo_part(name, 'repo name')}"
    if len(repo_id) > MAX_REPO_ID:
        raise bad_request(f"invalid repo id {repo_id[:40]!r}...: longer than {MAX_REPO_ID}")
    return repo_id


def check_file_path(path: object) -> str:
    """A path inside a repo: relative, '/'-separated, no '.', '..' or empty parts."""
    if not isinstance(path, str) or not path or "\\" in path or "\0" in path:
        raise bad_request(f"invalid path in repo {path!r}")
    if path.startswith("/") or any(p in ("", ".", "..") for p in path.split("/")):
        raise bad_request(f"path {path!r} leaves the repository")
    return path


# -- who may ask ----------------------------------------------------------------------------


def check_origin(headers) -> None:
    """Refuse what a web page could send: a foreign Origin, or a Host that is not loopback
    (DNS rebinding: a page's own host name resolving to 127.0.0.1)."""
    origin = headers.get("Origin")
    if origin is not None and urlsplit(origin).hostname not in LOOPBACK_HOSTS:
        raise Refused(
            403,
            f"requests from web pages are refused (Origin: {origin[:80]}): "
            "the loopback Hub serves local clients only",
            "ForbiddenOrigin",
        )
    host = headers.get("Host")
    if host is not None and urlsplit(f"//{host}").hostname not in LOOPBACK_HOSTS:
        raise Refused(403, f"Host {host[:80]!r} is not loopback: refused", "ForbiddenHost")


def check_write(authorization: str | None, token: str | None, read_only: bool) -> None:
    if read_only:
        raise Refused(
            403, "this loopback Hub is read-only (--read-only): writes are off", "ReadOnly"
        )
    if token is None:
        return
    if not authorization or not hmac.compare_digest(authorization, f"Bearer {token}"):
        raise Refused(
            401,
            "writes need the token `tinykit hub serve` printed at start: "
            "export the HF_TOKEN it printed in the client's shell",
            "Unauthorized",
        )


def upload_signature(token: str | None, oid: str) -> str:
    """LFS uploads are PUT without headers (huggingface_hub's lfs.py): the href carries the
    capability instead, given out only by the token-checked batch call."""
    return hmac.new((token or "").encode(), oid.encode(), hashlib.sha256).hexdigest()[:32]


# -- bodies ---------------------------------------------------------------------------------


def read_body(rfile: BinaryIO, headers, limit: int) -> bytes:
    """The request body, read in chunks up to `limit` bytes (never pre-allocated)."""
    if headers.get("Transfer-Encoding", "").lower() == "chunked":
        return _read_chunked(rfile, limit)
    raw = headers.get("Content-Length")
    if raw is None:
        return b""
    if not raw.strip().isdigit():
        raise bad_request(f"Content-Length {raw[:40]!r} is not a byte count")
    length = int(raw)
    if length > limit:
        raise Refused(413, f"body of {length} bytes is over this server's {limit}", "TooLarge")
    return _read_exact(rfile, length)


def _read_exact(rfile: BinaryIO, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = rfile.read(min(_CHUNK, n - len(buf)))
        if not chunk:
            raise bad_request(f"body ended after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _read_chunked(rfile: BinaryIO, limit: int) -> bytes:
    body = bytearray()
    while True:
        line = rfile.readline(1024).split(b";")[0].strip()
        try:
            size = int(line, 16)
        except ValueError:
            raise bad_request(f"bad chunk size {line[:20]!r}") from None
        if size < 0 or len(body) + size > limit:
            raise Refused(413, f"chunked body over this server's {limit} bytes", "TooLarge")
        if size == 0:
            break
        body += _read_exact(rfile, size)
        rfile.readline(1024)
    while rfile.readline(1024) not in (b"\r\n", b"\n", b""):  # trailers
        pass
    return bytes(body)


def parse_json(body: bytes, default: object = None) -> object:
    if not body.strip() and default is not None:
        return default
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:  # RecursionError: deeply nested input
        raise bad_request(f"body is not JSON: {type(e).__name__}") from None


def field(obj: object, name: str, kind: type | tuple[type, ...], default: object = ...):
    """`obj[name]`, checked to be a `kind`; a missing key uses `default` if one is given."""
    if not isinstance(obj, dict):
        raise bad_request(f"expected a JSON object holding {name!r}, got {type(obj).__name__}")
    if name not in obj and default is not ...:
        return default
    value = obj.get(name)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise bad_request(f"{name!r} must be {getattr(kind, '__name__', kind)}, got {value!r:.60}")
    return value
