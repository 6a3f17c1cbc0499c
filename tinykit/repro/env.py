"""Capture the environment a run used, secrets redacted, and diff two captures.

`capture()` returns (and with a path, writes) one JSON bundle: Python, every installed
distribution (the `pip freeze` view, read through importlib.metadata: no pip subprocess), editable
and VCS installs with their git commit, uncommitted diff and untracked files, torch/CUDA/cuDNN/NCCL
versions, devices (without initialising CUDA), CPU, OS, the relevant environment variables and the
seeds. Secret values are never written: variables named like tokens, keys or passwords become
"<redacted>", and every value (and git diff) is scrubbed of URL passwords and token-shaped
strings. The same world gives a byte-identical bundle (sorted keys, no timestamp).

`diff(a, b)` lists what differs, most relevant first: ML library versions, the Python and
torch/CUDA build, other packages, environment variables and seeds, then hardware and OS.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from tinykit import __version__
from tinykit._devices import physical_gpus
from tinykit.errors import UsageError
from tinykit.repro.redact import REDACTED, is_relevant_env, redact_env, scrub

__all__ = ["DiffEntry", "EnvDiff", "REDACTED", "capture", "diff", "load", "scrub", "to_json"]

SCHEMA = 1
# Version changes here explain most "it changed after the upgrade" reports; they are listed first.
KEY_PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "huggingface-hub",
    "datasets",
    "accelerate",
    "numpy",
    "peft",
    "trl",
    "deepspeed",
    "triton",
    "flash-attn",
    "xformers",
    "sentencepiece",
    "bitsandbytes",
    "vllm",
    "tinykit",
)


def capture(path: str | os.PathLike[str] | None = None, *, all_env: bool = False) -> dict[str, Any]:
    """Capture the environment of this process; with `path`, also write it there atomically.

    Args:
        path: where to write the JSON bundle (its directory must exist).
        all_env: keep every environment variable, not only the relevant ones (still redacted).
    """
    bundle = {
        "tinykit": {"schema": SCHEMA, "version": __version__},
        "python": _python(),
        "packages": _packages(),
        "sources": _sources(),
        "torch": _torch(),
        "devices": physical_gpus(),
        "cpu": _cpu(),
        "os": _os(),
        "env": redact_env(os.environ, all_env=all_env),
        "seeds": {
            k: os.environ[k]
            for k in ("TINYKIT_SEED", "PYTHONHASHSEED", "PL_GLOBAL_SEED")
            if k in os.environ
        },
    }
    if path is not None:
        _write_atomic(Path(path), to_json(bundle))
    return bundle


def to_json(bundle: Mapping[str, Any]) -> str:
    return json.dumps(bundle, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    if not path.parent.is_dir():
        raise UsageError(
            f"cannot write the environment bundle to {path}: directory {path.parent} "
            "does not exist. Create it first (mkdir -p) or pick another -o path."
        )
    from tinykit.staging import output_errors

    with output_errors(path):  # disk full, read-only: one line, and no temp file left
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _python() -> dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "venv": sys.prefix != sys.base_prefix,
    }


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _distributions() -> dict[str, importlib.metadata.Distribution]:
    """Installed distributions by canonical name; the first on sys.path wins, as for import."""
    found: dict[str, importlib.metadata.Distribution] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(_canonical(name), dist)
    return found


def _packages() -> dict[str, str]:
    return {name: dist.version for name, dist in sorted(_distributions().items())}


def _sources() -> dict[str, Any]:
    """Editable, local and VCS installs (PEP 610 direct_url.json), with git state for local ones."""
    sources: dict[str, Any] = {}
    for name, dist in sorted(_distributions().items()):
        text = dist.read_text("direct_url.json")
        if not text:
            continue
        try:
            info = json.loads(text)
        except json.JSONDecodeError:
            continue
        url = str(info.get("url", ""))
        entry: dict[str, Any] = {"url": scrub(url)}
        if info.get("dir_info", {}).get("editable"):
            entry["editable"] = True
        if "vcs_info" in info:
            entry["vcs"] = info["vcs_info"].get("vcs")
            entry["commit"] = info["vcs_info"].get("commit_id")
        if url.startswith("file://"):
            entry.update(_git_state(Path(unquote(urlparse(url).path))))
        sources[name] = entry
    return sources


def _git(repo: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _git_state(path: Path) -> dict[str, Any]:
    """Commit, uncommitted diff (tracked files) and untracked files of a local install's clone."""
    if not path.is_dir() or _git(path, "rev-parse", "--is-inside-work-tree") is None:
        return {}
    commit = (_git(path, "rev-parse", "HEAD") or "").strip() or None
    patch = _git(path, "diff", "HEAD", "--no-color", "--no-ext-diff") or ""
    untracked = (_git(path, "ls-files", "--others", "--exclude-standard") or "").splitlines()
    return {
        "commit": commit,
        "dirty": bool(patch or untracked),
        "diff": scrub(patch),
        "untracked": untracked,
    }


def _torch() -> dict[str, Any]:
    if importlib.util.find_spec("torch") is None:
        return {}
    import torch

    info: dict[str, Any] = {
        "version": torch.__version__,
        "git_version": getattr(torch.version, "git_version", None),
        "debug": bool(torch.version.debug),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "num_threads": torch.get_num_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cuda_available": torch.cuda.is_available(),
        "mps_available": torch.backends.mps.is_available(),
    }
    if info["cuda_available"]:
        info["cuda_arch_list"] = torch.cuda.get_arch_list()
        nccl = getattr(torch.cuda, "nccl", None)
        info["nccl"] = ".".join(map(str, nccl.version())) if nccl is not None else None
    return info


def _cpu() -> dict[str, Any]:
    import psutil

    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    limit = None
    try:  # cgroup v2: the memory the container may really use
        raw = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        limit = None if raw == "max" else int(raw)
    except (OSError, ValueError):
        pass
    return {
        "model": model,
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
        "cgroup_memory_limit": limit,
    }


def _os() -> dict[str, Any]:
    return {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "libc": " ".join(platform.libc_ver()).strip(),
        "hostname": socket.gethostname(),
    }


# -- diff -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffEntry:
    section: str
    key: str
    a: Any
    b: Any


@dataclass
class EnvDiff:
    """What differs between bundles `a` and `b`, most relevant first."""

    a: str
    b: str
    entries: list[DiffEntry] = field(default_factory=list)

    def render(self) -> str:
        if not self.entries:
            return f"no differences between {self.a} and {self.b}"
        lines = [
            f"{len(self.entries)} differences between {self.a} (A) and {self.b} (B), "
            "most relevant first:"
        ]
        for e in self.entries:
            lines.append(f"  {e.section}.{e.key}: {_show(e.a)} -> {_show(e.b)}")
        return "\n".join(lines)


def _show(value: Any) -> str:
    if value is None:
        return "(absent)"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a bundle written by `capture`; a clear UsageError for anything else."""
    try:
        bundle = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(
            f"cannot read environment bundle {path}: {e}. Write one with "
            "`tinykit env capture -o FILE`."
        ) from e
    if not isinstance(bundle, dict) or "packages" not in bundle or "tinykit" not in bundle:
        raise UsageError(
            f"{path} is not a tinykit environment bundle (no 'tinykit'/'packages' "
            "keys). Write one with `tinykit env capture -o FILE`."
        )
    return bundle


def _flatten(bundle: Mapping[str, Any]) -> dict[tuple[str, str], Any]:
    flat: dict[tuple[str, str], Any] = {}
    for section, value in bundle.items():
        if isinstance(value, Mapping):
            for key, v in value.items():
                if isinstance(v, Mapping):
                    for sub, w in v.items():
                        flat[(section, f"{key}.{sub}")] = w
                else:
                    flat[(section, str(key))] = v
        elif isinstance(value, list):
            for i, v in enumerate(value):
                for key, w in v.items() if isinstance(v, Mapping) else [("value", v)]:
                    flat[(section, f"{i}.{key}")] = w
        else:
            flat[(section, "")] = value
    return flat


def _rank(section: str, key: str) -> tuple[int, int, str]:
    """Smaller is more relevant: library versions, then builds, env vars, hardware, the rest."""
    if section == "packages":
        return (0, KEY_PACKAGES.index(key), key) if key in KEY_PACKAGES else (2, 0, key)
    if section == "torch" or (section == "python" and key in ("version", "implementation")):
        return (1, 0, key)
    if section == "sources":
        name = key.split(".", 1)[0]
        return (2, 0 if name in KEY_PACKAGES else 1, key)
    if section in ("env", "seeds"):
        return (3, 0 if section == "seeds" or is_relevant_env(key) else 1, key)
    if section in ("devices", "cpu"):
        return (4, 0 if section == "devices" else 1, key)
    return (5, 0, f"{section}.{key}")


def diff(
    a: str | os.PathLike[str] | Mapping[str, Any], b: str | os.PathLike[str] | Mapping[str, Any]
) -> EnvDiff:
    """What differs between two bundles (paths or dicts), most relevant first."""
    names = [str(x) if not isinstance(x, Mapping) else "<bundle>" for x in (a, b)]
    fa, fb = (_flatten(x if isinstance(x, Mapping) else load(x)) for x in (a, b))
    keys = [k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k)]
    keys.sort(key=lambda k: _rank(*k))
    return EnvDiff(
        names[0], names[1], [DiffEntry(s, k, fa.get((s, k)), fb.get((s, k))) for s, k in keys]
    )
