"""Which releases of a package exist, read from the index (or a local wheel folder) through pip."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence

from packaging.version import InvalidVersion, Version

from tinykit.errors import BisectError, SetupError

__all__ = ["index_options", "list_releases", "parse_version", "sort_versions"]


def index_options(find_links: str | None = None, index_url: str | None = None) -> list[str]:
    """pip options that point every lookup and install at the same place."""
    opts: list[str] = []
    if find_links:  # a local wheel folder only: tests and air-gapped machines
        opts += ["--no-index", "--find-links", str(find_links)]
    if index_url:
        opts += ["--index-url", index_url]
    return opts


def parse_version(text: str, what: str = "version") -> Version:
    """A PEP 440 version; anything else is a usage error naming it and where it came from."""
    try:
        return Version(str(text))
    except InvalidVersion:
        raise BisectError(
            f"{what} {text!r} is not a version. Give a PEP 440 release, e.g. 4.57.1."
        ) from None


def sort_versions(versions: Sequence[str]) -> list[str]:
    """Oldest first; an unparsable version is a usage error naming it."""
    try:
        return sorted(dict.fromkeys(versions), key=Version)
    except InvalidVersion as e:
        raise BisectError(f"{e}. Give versions as PEP 440 strings, e.g. 4.57.1.") from None


def list_releases(
    package: str, *, pre: bool = False, find_links: str | None = None, index_url: str | None = None
) -> list[str]:
    """Every release of `package` the index offers, oldest first (`pip index versions`)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"]
    cmd += index_options(find_links, index_url) + (["--pre"] if pre else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        raise SetupError(
            f"listing releases of {package} timed out after 120 s. Check the index, or pass "
            "--versions a,b,c."
        ) from None
    match = re.search(r"Available versions:\s*(.+)", out.stdout)
    if out.returncode != 0 or not match:
        if "No matching distribution" in out.stderr + out.stdout:
            raise BisectError(
                f"unknown package {package!r}: the index has no release of it. Check the name "
                "(pip index versions NAME), or pass --find-links for a local wheel folder."
            )
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
        raise SetupError(f"pip could not list releases of {package}: {tail[0]}. Check the index.")
    return sort_versions([v.strip() for v in match.group(1).split(",") if v.strip()])
