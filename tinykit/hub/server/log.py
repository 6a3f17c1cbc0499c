"""What the loopback Hub records and injects: the request log, and faults for error-path tests."""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tinykit.hub.layout import is_weight_file


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it. `filename` is set for file requests (resolve / CDN)."""

    method: str
    path: str
    status: int
    kind: str  # "resolve", "cdn", "api", "lfs" or "other"
    repo_type: str | None = None
    repo_id: str | None = None
    revision: str | None = None
    filename: str | None = None
    range: str | None = None

    def __str__(self) -> str:
        return f"{self.method} {self.status} {self.path}"


class RequestLog:
    """Thread-safe, append-only list of `RequestRecord`s, with the queries tests ask most."""

    def __init__(self, on_record: Callable[[RequestRecord], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self.on_record = on_record

    def append(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)
        if self.on_record:
            self.on_record(record)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()

    @property
    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def __iter__(self):
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def _file_records(self, repo_id: str | None) -> list[RequestRecord]:
        return [
            r
            for r in self.records
            if r.kind in ("resolve", "cdn")
            and (repo_id is None or (r.repo_id or "").lower() == repo_id.lower())
        ]

    def files_requested(self, repo_id: str | None = None) -> list[str]:
        """Names of files asked for (HEAD or GET on resolve/CDN URLs), in request order."""
        return [r.filename for r in self._file_records(repo_id) if r.filename is not None]

    def files_downloaded(self, repo_id: str | None = None) -> list[str]:
        """Names of files whose bytes were sent (GET answered 200 or 206), in request order."""
        return [
            r.filename
            for r in self._file_records(repo_id)
            if r.method == "GET" and r.status in (200, 206) and r.filename is not None
        ]

    def weight_files_requested(self) -> list[str]:
        return [f for f in self.files_requested() if is_weight_file(f)]


@dataclass
class Fault:
    """Delay and/or fail requests whose method and URL path match; `times=None` means always."""

    path_glob: str = "*"
    method: str | None = None
    status: int | None = None
    error_code: str | None = None
    delay: float = 0.0
    times: int | None = None
    hits: int = field(default=0, init=False)

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and fnmatch.fnmatchcase(
            path, self.path_glob
        )


class FaultList:
    """The faults in force; `apply` sleeps for slow ones and returns the first failing one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def apply(self, method: str, path: str) -> Fault | None:
        with self._lock:
            active = [f for f in self._faults if f.matches(method, path)]
            active = [f for f in active if f.times is None or f.hits < f.times]
            for f in active:
                f.hits += 1
        delay = sum(f.delay for f in active)
        if delay:
            time.sleep(delay)
        return next((f for f in active if f.status is not None), None)
