"""Call "module:function" in a fresh interpreter and get back its result or its exception.

One protocol for every tinykit feature that needs a clean process: `check_determinism`'s process
mode, the distributed rank worker (which keeps its own pipe protocol but names functions and
packs exceptions with the helpers here) and, next, bisection.

    >>> child = start_child("my_pkg.steps:train", steps=2)   # doctest: +SKIP
    >>> child.result(timeout=600)                            # doctest: +SKIP

The call (a `FunctionRef`, args, kwargs) goes to the child in a pickle file and the outcome comes
back in another one, so stdout and stderr stay free for the function's own output. An exception
raised by the function is re-raised in the parent with the child's traceback as a note; a child
that dies without an outcome (segfault, OOM kill, `os._exit`) raises `ChildProcessFailed`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinykit.errors import ChildProcessFailed, UsageError

__all__ = [
    "Child",
    "FunctionRef",
    "describe",
    "pack_exception",
    "resolve",
    "run_in_child",
    "start_child",
    "unpack_exception",
]


@dataclass(frozen=True)
class FunctionRef:
    """A module-level function named by module, qualified name and (optionally) file.

    Pickle alone would find a test function only if its module imports by name; pytest's
    `importlib` import mode gives test modules names that do not, hence the file fallback.
    """

    module: str
    qualname: str
    file: str | None = None

    @classmethod
    def of(cls, fn: Callable[..., Any], purpose: str = "a fresh process") -> FunctionRef:
        """The reference of a module-level function; UsageError for lambdas and nested ones."""
        module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
        if not module or module == "__main__" or "<" in qualname:
            raise UsageError(
                f"{describe(fn)} cannot be imported in {purpose}: it is a lambda, a nested "
                "function or defined in __main__. Move it to a module (then pass the function "
                "or 'module:function')."
            )
        file = getattr(sys.modules.get(module), "__file__", None)
        return cls(module, qualname, file)

    @classmethod
    def parse(cls, ref: str) -> FunctionRef:
        """Parse "package.module:function" or "path/to/script.py:function"."""
        target, sep, qualname = ref.rpartition(":")
        if not sep or not target or not qualname:
            raise UsageError(
                f"{ref!r} is not a function reference. Write it as "
                "'package.module:function' or 'path/to/script.py:function'."
            )
        if target.endswith(".py"):
            path = Path(target).resolve()
            return cls(path.stem, qualname, str(path))
        return cls(target, qualname)

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}"

    def resolve(self) -> Callable[..., Any]:
        """Import the module (or load it from `file`) and return the function."""
        try:
            obj: Any = _import(self.module, self.file)
            for part in self.qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, FileNotFoundError, AttributeError) as e:
            where = self.file or self.module
            raise UsageError(
                f"cannot load {str(self)!r} ({where}): {type(e).__name__}: {e}. Check the module "
                "path (run from the directory that contains it, or set PYTHONPATH) and the "
                "function name."
            ) from e
        if not callable(obj):
            raise UsageError(
                f"{str(self)!r} is a {type(obj).__name__}, not a function. Point at a callable."
            )
        return obj


def resolve(ref: str | FunctionRef) -> Callable[..., Any]:
    """The function that "module:function", "path/file.py:function" or a FunctionRef names."""
    return (FunctionRef.parse(ref) if isinstance(ref, str) else ref).resolve()


def describe(fn: Callable[..., Any]) -> str:
    """ "module:qualname" for messages, also for functions no child could import."""
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def _import(name: str, file: str | None) -> Any:
    mod = sys.modules.get(name)
    if mod is not None and (not file or _same_file(getattr(mod, "__file__", None), file)):
        return mod
    if not file:
        # A child runs with `python -m`, which puts the working directory on sys.path; the
        # `tinykit` console script does not: find modules of the current folder here too.
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
        return importlib.import_module(name)
    # Import by name only when that name really is this file: a script called "test.py" must
    # not be replaced by the stdlib's `test` package.
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec(name)
        if spec is not None and _same_file(spec.origin, file):
            return importlib.import_module(name)
    if not Path(file).is_file():
        raise FileNotFoundError(file)
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load module {name!r} from {file}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _same_file(a: str | None, b: str) -> bool:
    try:
        return bool(a) and os.path.samefile(a, b)  # type: ignore[arg-type]
    except OSError:
        return False


# -- exceptions across a process boundary ---------------------------------------------------


def pack_exception(exc: BaseException) -> dict[str, Any]:
    """A picklable description of `exc`; `exc_bytes` is None when it cannot be rebuilt."""
    exc_bytes: bytes | None
    try:
        exc_bytes = packed = pickle.dumps(exc)
        pickle.loads(packed)  # some exceptions pickle but cannot be rebuilt
    except Exception:
        exc_bytes = None
    outcomes = sys.modules.get("_pytest.outcomes")  # pytest.skip()/xfail() raise these
    is_outcome = outcomes is not None and isinstance(exc, outcomes.OutcomeException)
    return {
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "pytest_outcome": type(exc).__name__ if is_outcome else None,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(exc)),
        "exc_bytes": exc_bytes,
    }


def unpack_exception(packed: dict[str, Any], where: str = "the child process") -> BaseException:
    """The original exception with the remote traceback as a note, or a stand-in for it."""
    exc: BaseException | None = None
    if exc_bytes := packed.get("exc_bytes"):
        with contextlib.suppress(Exception):  # e.g. a class this process cannot import
            exc = pickle.loads(exc_bytes)
    if exc is None:
        return ChildProcessFailed(
            f"{where} raised {packed['type']}: {packed['message']}, which cannot be rebuilt in "
            "this process (it does not pickle). The traceback is in .remote_traceback.",
            remote_type=packed["type"],
            remote_traceback=packed["traceback"],
        )
    exc.add_note(f"Traceback in {where}:\n{packed['traceback'].rstrip()}")
    return exc


# -- the runner -----------------------------------------------------------------------------


class Child:
    """One running child process; `result()` waits for it and returns or raises its outcome."""

    def __init__(
        self,
        ref: str | FunctionRef,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        env: dict[str, str] | None = None,
        python: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        self.ref = FunctionRef.parse(ref) if isinstance(ref, str) else ref
        self._tmp = Path(tempfile.mkdtemp(prefix="tinykit-child-"))
        self._out = self._tmp / "outcome.pkl"
        call = self._tmp / "call.pkl"
        try:
            call.write_bytes(pickle.dumps((self.ref, tuple(args), dict(kwargs or {}))))
        except Exception as e:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise UsageError(
                f"cannot send the arguments of {self.ref} to a child process: {e}. Pass data "
                "that pickles (paths, numbers, tensors) and build objects inside the function."
            ) from e
        full_env = dict(os.environ if env is None else env)
        # The child must find what the parent can import (pytest and scripts extend sys.path).
        full_env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
        self.proc = subprocess.Popen(
            [python or sys.executable, "-m", "tinykit._child", str(call), str(self._out)],
            env=full_env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # so a timeout can end what the function started, too
        )

    def result(self, timeout: float | None = None) -> Any:
        """The function's return value; re-raises its exception.

        Raises:
            ChildProcessFailed: the child died without an outcome, or ran past `timeout`.
        """
        try:
            try:
                _, stderr = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise ChildProcessFailed(
                    f"the child process running {self.ref} ran past its timeout of {timeout} s "
                    "and was killed. Raise the timeout, or make the function do less.",
                    returncode=None,
                    timed_out=True,
                ) from None
            if self.proc.returncode != 0 or not self._out.exists():
                lines = stderr.strip().splitlines()
                raise ChildProcessFailed(
                    f"the child process running {self.ref} exited with code "
                    f"{self.proc.returncode} without a result ({lines[-1] if lines else 'no output'}"
                    "). Run the function in this process to see the error.",
                    returncode=self.proc.returncode,
                    stderr=stderr,
                    timed_out=False,
                )
            outcome = pickle.loads(self._out.read_bytes())
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)
        if "error" in outcome:
            raise unpack_exception(outcome["error"], f"the child process running {self.ref}")
        return outcome["value"]

    def kill(self) -> None:
        """End the child and whatever it started; its outcome is discarded."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.communicate()
        shutil.rmtree(self._tmp, ignore_errors=True)


def start_child(ref: str | FunctionRef, /, *args: Any, **kwargs: Any) -> Child:
    """Start `ref(*args, **kwargs)` in a fresh interpreter; collect it with `.result()`."""
    return Child(ref, args, kwargs)


def run_in_child(
    ref: str | FunctionRef, /, *args: Any, timeout: float | None = None, **kwargs: Any
) -> Any:
    """Run `ref(*args, **kwargs)` in a fresh interpreter and return its result (or raise)."""
    return Child(ref, args, kwargs).result(timeout)


def _child_main(call_file: str, out_file: str) -> int:
    ref, args, kwargs = pickle.loads(Path(call_file).read_bytes())
    try:
        outcome: dict[str, Any] = {"value": ref.resolve()(*args, **kwargs)}
        data = pickle.dumps(outcome)
    except BaseException as e:  # sent back to the parent, which raises it there
        data = pickle.dumps({"error": pack_exception(e)})
    tmp = Path(out_file).with_suffix(".partial")
    tmp.write_bytes(data)
    os.replace(tmp, out_file)  # a half-written outcome is never read as a result
    return 0


if __name__ == "__main__":
    # Run the importable module's main, not __main__'s copy: pickled FunctionRefs name
    # tinykit._child.FunctionRef, and unpickling must find that class.
    from tinykit._child import _child_main as _main

    sys.exit(_main(*sys.argv[1:]))
