"""Run code around first-time imports: after one module has been imported, or around every
outermost import while a block runs.

Two users: `tinykit record -- CMD` starts recording in each interpreter once torch has been
imported (importing torch at interpreter start would cost seconds in every Python process the
command runs, pip's included), and memory budgets set aside the memory that first-time imports
made during a test (`tinykit.memory.track`).

Both rest on one `sys.meta_path` finder. It asks the finders after it for the module's spec, as
the import system would, and wraps the spec's loader so that `exec_module` (where a module's
code runs) is bracketed by the callbacks. When the module has run, its `__loader__` and
`__spec__.loader` are the original loader again, so nothing that inspects them later sees the
wrapper. A finder that only watches some names returns None for the others: their imports go
on untouched.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

__all__ = ["ImportWatch", "after_import", "watch_imports"]


class ImportWatch(importlib.abc.MetaPathFinder):
    """`before(name)` and `after(name)` around the code of each module imported for the first
    time (each of `names`, or any). `depth` is how many such imports are running in this
    thread: 1 for an outermost one."""

    def __init__(
        self,
        *,
        names: frozenset[str] | None = None,
        before: Callable[[str], None] | None = None,
        after: Callable[[str], None] | None = None,
    ) -> None:
        self.names, self.before, self.after = names, before, after
        self._local = threading.local()

    @property
    def depth(self) -> int:
        return getattr(self._local, "depth", 0)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if self.names is not None and fullname not in self.names:
            return None
        if getattr(self._local, "finding", False):
            return None  # a finder below asked the import system: do not wrap twice
        self._local.finding = True
        try:
            spec = self._spec_below(fullname, path, target)
        finally:
            self._local.finding = False
        if spec is not None and hasattr(getattr(spec, "loader", None), "exec_module"):
            spec.loader = _Wrapped(spec.loader, self)
        return spec

    def _spec_below(self, fullname: str, path: Any, target: Any) -> Any:
        for finder in list(sys.meta_path):
            if finder is self or isinstance(finder, ImportWatch):
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                return spec
        return None

    def _enter(self, name: str) -> None:
        self._local.depth = self.depth + 1
        if self.before is not None:
            self.before(name)

    def _exit(self, name: str, ok: bool) -> None:
        try:
            if ok and self.after is not None:
                self.after(name)
        finally:
            self._local.depth = self.depth - 1

    def install(self) -> ImportWatch:
        sys.meta_path.insert(0, self)
        return self

    def remove(self) -> None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)


class _Wrapped(importlib.abc.Loader):
    """A loader whose `exec_module` the watch brackets; everything else is the original's."""

    def __init__(self, inner: Any, watch: ImportWatch) -> None:
        self._inner, self._watch = inner, watch

    def create_module(self, spec: Any) -> ModuleType | None:
        create = getattr(self._inner, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        self._watch._enter(name)
        ok = False
        try:
            self._inner.exec_module(module)
            ok = True
        finally:
            # (a module may have replaced itself by an object that refuses new attributes:
            # torch._dynamo.config does)
            with contextlib.suppress(Exception):
                if module.__loader__ is self:
                    module.__loader__ = self._inner
            spec = getattr(module, "__spec__", None)
            with contextlib.suppress(Exception):
                if spec is not None and spec.loader is self:
                    spec.loader = self._inner
            self._watch._exit(name, ok)

    def __getattr__(self, attr: str) -> Any:  # get_source, get_resource_reader, is_package...
        return getattr(self._inner, attr)


@contextlib.contextmanager
def watch_imports(
    *,
    before: Callable[[str], None] | None = None,
    after: Callable[[str], None] | None = None,
) -> Iterator[ImportWatch]:
    """Call `before(name)` / `after(name)` around every first-time import inside the block
    (`after` only when the module's code ran to the end)."""
    watch = ImportWatch(before=before, after=after).install()
    try:
        yield watch
    finally:
        watch.remove()


def after_import(name: str, callback: Callable[[], None]) -> None:
    """Call `callback()` once, as soon as the top-level module `name` has been imported (now,
    if it already is); the watch then removes itself."""
    if name in sys.modules:
        callback()
        return

    def done(_: str) -> None:
        watch.remove()
        callback()

    watch = ImportWatch(names=frozenset([name]), after=done).install()
