"""A loopback Hugging Face Hub: real HTTP on 127.0.0.1, serving plain folders to unchanged clients.

    # the tree holds <org>/<name>/<files> and datasets/<org>/<name>/<files>
    with tinykit.hub.server.serve("path/to/tree") as hub:
        os.environ["HF_ENDPOINT"] = hub.endpoint  # for subprocesses; in-process: use_endpoint
        ...
        assert not hub.log.weight_files_requested()

Two listening sockets, both on 127.0.0.1: the Hub itself, and a second origin standing in for
the CDN that LFS files are redirected to (so the client's "other origin" code path runs, and
the authorization header is dropped as it is in production). Standard library only.

Writes (create-repo, commit, LFS upload) need `Authorization: Bearer <hub.token>` (a fresh
random token unless one is passed; `hub.client_env` carries it as HF_TOKEN), or are refused
altogether with `read_only=True`. Reads are open to loopback clients; any request with a
non-loopback `Origin` or `Host` (a web page, DNS rebinding) is refused.

The server serves folders and imports nothing above `tinykit.hub`: serving a stand-in manifest
(built through the artifact cache) is `tinykit.standins.serve`, whose `HubServer` subclass
adds `add_manifest` (it is `tinykit.HubServer` and the `tiny_hub` fixture's server).
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Self

from tinykit.errors import UsageError
from tinykit.hub.layout import is_weight_file
from tinykit.hub.server.handler import HubHandler
from tinykit.hub.server.log import Fault, FaultList, RequestLog, RequestRecord
from tinykit.hub.server.store import RepoStore

__all__ = ["Fault", "HubServer", "RequestLog", "RequestRecord", "is_weight_file", "serve"]

LOOPBACK = "127.0.0.1"


MAX_BODY = 1 << 30  # 1 GiB: a request body over it is refused with 413 before it is read
READ_TIMEOUT = 30.0  # seconds without a byte from a client before its request is dropped


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # snapshot_download uses 8 threads; a stuck client must not block close()
    allow_reuse_address = True
    request_queue_size = 1024  # listen backlog: the default 5 resets connections under load

    def handle_error(self, request, client_address) -> None:
        # A client that went away or stalled is not news; anything else is one line, no traceback.
        error = sys.exc_info()[1]
        if not isinstance(error, (ConnectionError, TimeoutError)):
            print(f"tinykit hub: {type(error).__name__}: {error}", file=sys.stderr)


class HubServer:
    """A running loopback Hub: `endpoint`, `cdn_endpoint`, `store`, `log`, `faults`."""

    def __init__(
        self,
        root: Path,
        port: int = 0,
        on_request: Callable[[RequestRecord], None] | None = None,
        *,
        token: str | None = None,
        read_only: bool = False,
        max_body: int = MAX_BODY,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        root = Path(root)
        if not root.is_dir():
            raise UsageError(
                f"Cannot serve {str(root)!r}: it is not a directory. "
                "Pass a folder laid out as <org>/<name>/<files> "
                "(datasets under datasets/<org>/<name>/)."
            )
        if not 0 <= port <= 65535:
            raise UsageError(
                f"Cannot listen on port {port}: ports are 0-65535. Pick another --port, or 0 for a free one."
            )
        self.store = RepoStore(root)
        self.log = RequestLog(on_request)
        self.faults = FaultList()
        self.token = token or f"hf_tinykit_{secrets.token_urlsafe(24)}"
        self.read_only, self.max_body = read_only, max_body
        handler = type("BoundHubHandler", (HubHandler,), {"hub": self, "timeout": read_timeout})
        try:
            self._hub = _Server((LOOPBACK, port), handler)
        except OSError as e:
            raise UsageError(
                f"Cannot listen on {LOOPBACK}:{port}: {e.strerror}. "
                "Pick another --port, or 0 for a free one."
            ) from e
        self._cdn = _Server((LOOPBACK, 0), handler)
        self.endpoint = f"http://{LOOPBACK}:{self._hub.server_address[1]}"
        self.cdn_endpoint = f"http://{LOOPBACK}:{self._cdn.server_address[1]}"
        self._threads = [
            threading.Thread(target=s.serve_forever, name=f"tinykit-hub-{i}", daemon=True)
            for i, s in enumerate((self._hub, self._cdn))
        ]
        for t in self._threads:
            t.start()

    @property
    def port(self) -> int:
        return self._hub.server_address[1]

    @property
    def client_env(self) -> dict[str, str]:
        """What a client process needs: HF_ENDPOINT, HF_TOKEN (writes), Xet off, no telemetry."""
        from tinykit.hub.client import CLIENT_ENV

        return {"HF_ENDPOINT": self.endpoint, "HF_TOKEN": self.token, **CLIENT_ENV}

    # -- what to serve, and how to misbehave (the `tiny_hub` fixture exposes these) -----------

    def add_model(self, repo_id: str, folder: str | Path, *, revision: str = "main") -> None:
        """Serve `folder` as model repo `repo_id` (at branch `revision`)."""
        self.store.mount("model", repo_id, Path(folder), revision)

    def add_dataset(self, repo_id: str, folder: str | Path, *, revision: str = "main") -> None:
        """Serve `folder` as dataset repo `repo_id` (at branch `revision`)."""
        self.store.mount("dataset", repo_id, Path(folder), revision)

    def gate(self, repo_id: str, *, token: str | None = None, repo_type: str = "model") -> None:
        """Answer file downloads with 401 GatedRepo, unless sent with `Bearer <token>`."""
        self.store.gate(repo_type, repo_id, token)

    def hide(self, repo_id: str, path: str | None = None, *, repo_type: str = "model") -> None:
        """Make a served repo (or one file of it) missing: 404 RepoNotFound / EntryNotFound."""
        self.store.hide(repo_type, repo_id, path)

    def fail(
        self,
        path_glob: str = "*",
        *,
        status: int = 500,
        error_code: str | None = None,
        times: int | None = None,
        method: str | None = None,
    ) -> Fault:
        """Answer matching requests (URL path glob) with `status`; `times=None`: always."""
        return self.faults.add(Fault(path_glob, method, status, error_code, times=times))

    def slow(self, seconds: float, path_glob: str = "*", *, method: str | None = None) -> Fault:
        """Delay matching requests by `seconds` before answering them."""
        return self.faults.add(Fault(path_glob, method, delay=seconds))

    def reset(self, root: Path) -> None:
        """Forget every mount, gate, fault and logged request, and serve `root`."""
        self.store.reset(root)
        self.faults.clear()
        self.log.clear()

    def close(self) -> None:
        try:
            for s in (self._hub, self._cdn):
                s.shutdown()
                s.server_close()
            for t in self._threads:
                t.join(timeout=5)
        finally:  # uploaded LFS objects live outside the served folder: never left behind
            shutil.rmtree(self.store.lfs_objects, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def serve(
    root: str | Path,
    port: int = 0,
    on_request: Callable[[RequestRecord], None] | None = None,
    **options: object,
) -> Iterator[HubServer]:
    """Serve the folder tree `root` on 127.0.0.1 (`port=0`: a free port) until the block ends.
    `options`: token, read_only, max_body, read_timeout (see `HubServer`)."""
    with HubServer(Path(root), port, on_request, **options) as hub:  # type: ignore[arg-type]
        yield hub
