"""One cached environment per (package, version): a `pip install --no-deps --target` overlay.

Why an overlay folder and not a venv: the folder is prepended to PYTHONPATH over the base
interpreter, so every other package stays exactly the base environment's (torch included, which
pip could not reinstall from the index here anyway), and building one is a single pip call with no
interpreter copy. `benchmarks/bisect.py` measures it against a fresh venv per step. Requirements the
base environment does not satisfy for that version are added to the overlay, also without their
dependencies, a few rounds deep; what still cannot be met makes the step a skip.

Overlays live under `<tinykit cache>/bisect-envs/`, keyed by package, version, Python and the
index options, so later bisects reuse them. Each is built in a temp folder and renamed into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tinykit.artifacts.cache import default_root
from tinykit.bisect.releases import index_options

__all__ = ["Overlay", "env_root", "overlay"]

READY = "tinykit-overlay.json"
# The overlay's own packages are checked against these; pip --target does not resolve against them.
MAX_ROUNDS = 4


@dataclass
class Overlay:
    """A built overlay (`path` is None when the install failed: `error` says why)."""

    package: str
    version: str
    path: Path | None
    seconds: float
    cached: bool
    error: str = ""
    base: bool = False  # the version already installed here: no overlay needed

    @property
    def failed(self) -> bool:
        return self.path is None and not self.base

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a step runs in: the overlay first on PYTHONPATH and PATH."""
        env = dict(os.environ if base is None else base)
        if self.path is not None:
            old = env.get("PYTHONPATH")
            env["PYTHONPATH"] = os.pathsep.join([str(self.path)] + ([old] if old else []))
            env["PATH"] = os.pathsep.join([str(self.path / "bin"), env.get("PATH", "")])
        return env


def env_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    return Path(cache_dir) if cache_dir else default_root() / "bisect-envs"


def _key(package: str, version: str, opts: list[str]) -> str:
    digest = hashlib.sha256(json.dumps([sys.executable, opts]).encode()).hexdigest()[:10]
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return f"{canonicalize_name(package)}-{version}-{py}-{digest}"


def _pip_target(target: Path, reqs: list[str], opts: list[str]) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-compile",
        "--target",
        str(target),
    ]
    cmd += ["--disable-pip-version-check", "--no-warn-conflicts", "--quiet", *opts, *reqs]
    return subprocess.run(cmd, capture_output=True, text=True)


_UNMET = """
import importlib.metadata as md, json, sys
from packaging.requirements import Requirement
from packaging.version import Version
seen, todo, unmet = set(), [sys.argv[1]], []
while todo:  # walk the requirement tree as this interpreter (overlay first) sees it
    name = todo.pop()
    if name in seen:
        continue
    seen.add(name)
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            unmet.append(text.split(";")[0]); continue
        if req.specifier and not req.specifier.contains(Version(have), prereleases=True):
            unmet.append(text.split(";")[0]); continue
        todo.append(req.name)
print(json.dumps(unmet))
"""


def _unmet(package: str, target: Path) -> list[str]:
    env = Overlay(package, "", target, 0.0, False).environ()
    out = subprocess.run(
        [sys.executable, "-c", _UNMET, package], capture_output=True, text=True, env=env
    )
    return json.loads(out.stdout) if out.returncode == 0 else []


def overlay(
    package: str,
    version: str,
    *,
    find_links: str | None = None,
    index_url: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Overlay:
    """The cached overlay for `package==version`, built on first use."""
    import time

    start = time.perf_counter()
    try:  # the base environment's own version needs no install at all
        if importlib.metadata.version(package) == version:
            return Overlay(package, version, None, time.perf_counter() - start, True, base=True)
    except importlib.metadata.PackageNotFoundError:
        pass
    opts = index_options(find_links, index_url)
    final = env_root(cache_dir) / _key(package, version, opts)
    if (final / READY).exists():
        return Overlay(package, version, final, time.perf_counter() - start, True)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        done = _pip_target(tmp, [f"{package}=={version}"], opts)
        if done.returncode != 0:
            return Overlay(package, version, None, time.perf_counter() - start, False, _last(done))
        added: list[str] = []
        for _ in range(MAX_ROUNDS):  # add what this version needs and the base lacks
            unmet = [r for r in _unmet(package, tmp) if r not in added]
            if not unmet:
                break
            done = _pip_target(tmp, unmet, opts)
            if done.returncode != 0:
                why = f"cannot meet {', '.join(unmet)}: {_last(done)}"
                return Overlay(package, version, None, time.perf_counter() - start, False, why)
            added += unmet
        names = [str(Requirement(r).name) for r in added]
        (tmp / READY).write_text(
            json.dumps({"package": package, "version": version, "added": names})
        )
        with contextlib.suppress(OSError):  # another bisect built it meanwhile: theirs is as good
            tmp.rename(final)
        return Overlay(package, version, final, time.perf_counter() - start, False)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _last(done: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (done.stderr or done.stdout).strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else f"pip exited {done.returncode}"
