"""A loopback Hugging Face Hub: real HTTP on 127.0.0.1, serving plain folders to unchanged clients.

    # the tree holds <org>/<name>/<files> and datasets/<org>/<name>/<files>
    with tinykit.hub.server.serve("path/to/tree") as hub:
        os.environ["HF_ENDPOINT"] = hub.endpoint  # for subprocesses; in-process: use_endpoint
        ...
        assert not hub.log.weight_files_requested()

Two listening sockets, both on 127.0.0.1: the Hub itself, and a second origin standing in for
the CDN that LFS files are redirected to (so the client's "other origin" code path runs, and
the authorization header is dropped as it is in production). Standard library only.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

from tinykit.errors import UsageError
from tinykit.hub.server.handler import HubHandler
from tinykit.hub.server.log import Fault, FaultList, RequestLog, RequestRecord, is_weight_file
from tinykit.hub.server.store import RepoStore

__all__ = ["Fault", "HubServer", "RequestLog", "RequestRecord", "is_weight_file", "serve"]

LOOPBACK = "127.0.0.1"


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # snapshot_download uses 8 threads; a stuck client must not block close()
    allow_reuse_address = True


class HubServer:
    """A running loopback Hub: `endpoint`, `cdn_endpoint`, `store`, `log`, `faults`."""

    def __init__(
        self,
        root: Path,
        port: int = 0,
        on_request: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        root = Path(root)
        if not root.is_dir():
            raise UsageError(
                f"Cannot serve {str(root)!r}: it is not a directory. "
                "Pass a folder laid out as <org>/<name>/<files> "
                "(datasets under datasets/<org>/<name>/)."
            )
        self.store = RepoStore(root)
        self.log = RequestLog(on_request)
        self.faults = FaultList()
        handler = type("BoundHubHandler", (HubHandler,), {"hub": self})
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
        for s in (self._hub, self._cdn):
            s.shutdown()
            s.server_close()
        for t in self._threads:
            t.join(timeout=5)
        shutil.rmtree(self.store.lfs_objects, ignore_errors=True)

    def __enter__(self) -> HubServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def serve(
    root: str | Path,
    port: int = 0,
    on_request: Callable[[RequestRecord], None] | None = None,
) -> Iterator[HubServer]:
    """Serve the folder tree `root` on 127.0.0.1 (`port=0`: a free port) until the block ends."""
    with HubServer(Path(root), port, on_request) as hub:
        yield hub
