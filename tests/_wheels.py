"""Tiny pure-Python wheels written by hand: the local package the bisect tests and benchmark use.

A wheel is a zip with the module files, METADATA, WHEEL and a RECORD of sha256 hashes; writing it
directly takes milliseconds, where `pip wheel` needs a build backend per version.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["write_wheel", "regression_wheels"]


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(
    folder: str | os.PathLike[str],
    name: str,
    version: str,
    files: Mapping[str, str],
    requires: tuple[str, ...] = (),
) -> Path:
    """Write `name-version-py3-none-any.whl` holding `files` (path -> text) into `folder`."""
    dist = f"{name.replace('-', '_')}-{version}"
    meta = "\n".join(
        ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        + [f"Requires-Dist: {r}" for r in requires]
    )
    wheel = "Wheel-Version: 1.0\nGenerator: tinykit\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries = {**{k: v.encode() for k, v in files.items()}}
    entries[f"{dist}.dist-info/METADATA"] = (meta + "\n").encode()
    entries[f"{dist}.dist-info/WHEEL"] = wheel.encode()
    record = [_record_line(k, v) for k, v in entries.items()] + [f"{dist}.dist-info/RECORD,,"]
    entries[f"{dist}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    out = Path(folder) / f"{dist}-py3-none-any.whl"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w") as z:
        for k, v in entries.items():
            z.writestr(k, v)
    tmp.rename(out)
    return out


# check() returns the exit code a bisect step sees. The flaky release fails every other call,
# counted in a file, so "flaky" is detected deterministically with --repeat 2 or more.
_SOURCE = """VERSION = "{version}"


def check():
    if {flaky}:
        import os
        path = os.environ["TKDEMO_COUNTER"]
        n = int(open(path).read() or 0) if os.path.exists(path) else 0
        open(path, "w").write(str(n + 1))
        return n % 2
    return {bad}
"""


def regression_wheels(
    folder: str | os.PathLike[str],
    versions: list[str],
    *,
    first_bad: str,
    flaky: tuple[str, ...] = (),
    name: str = "tkdemo",
) -> list[Path]:
    """Wheels of `name` at each version; `check()` returns 1 from `first_bad` on, 0 before."""
    from packaging.version import Version

    out = []
    for v in versions:
        src = _SOURCE.format(version=v, flaky=v in flaky, bad=int(Version(v) >= Version(first_bad)))
        out.append(write_wheel(folder, name, v, {f"{name}/__init__.py": src}))
    return out
