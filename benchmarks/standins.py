"""Benchmark: one `tinykit standins build` of a manifest vs one `tinykit make-tiny` call per repo.

    python benchmarks/standins.py [MANIFEST]    # default: tests/clients/peft-standins.toml (15 repos)

Both sides start from nothing: the batch build runs as one CLI process into an empty artifact
cache (so every entry is really built; torch and transformers are imported once), the
baseline as one `make-tiny` CLI process per repo with the same options (each pays the imports:
the hand-written shell loop a suite's maintainer would otherwise write). A third figure is the
batch build again with the cache warm. Goal: the batch <= 30 s where the loop takes ~290 s.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tinykit.standins.manifest import RENAMED, load_manifest  # noqa: E402


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    import os

    start = time.perf_counter()
    subprocess.run(
        cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})}
    )  # fmt: skip
    return time.perf_counter() - start


def make_tiny_args(options: dict) -> list[str]:
    """The entry's options as make-tiny flags (`model_class` -> `--class`)."""
    spelled = {v: k for k, v in RENAMED.items()}
    args = []
    for name, value in options.items():
        flag = "--" + spelled.get(name, name).replace("_", "-")
        args += [flag] if value is True else [] if value is False else [flag, str(value)]
    return args


def main() -> None:
    manifest_path = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "tests/clients/peft-standins.toml"
    )
    manifest = load_manifest(manifest_path)
    models = [e for e in manifest.entries if e.kind == "model"]
    tinykit = [sys.executable, "-m", "tinykit"]
    with tempfile.TemporaryDirectory(prefix="tinykit-bench-standins-") as tmp:
        env = {"TINYKIT_CACHE": str(Path(tmp) / "cache")}
        build = [*tinykit, "standins", "build", str(manifest_path), "-o", f"{tmp}/hub", "--force"]
        batch = timed(build, env)
        warm = timed(build, env)
        per_repo = []
        for entry in models:
            out = Path(tmp) / "loop" / entry.repo_id
            cmd = [
                *tinykit,
                "make-tiny",
                entry.source,
                "-o",
                str(out),
                *make_tiny_args(entry.options),
            ]
            per_repo.append(timed(cmd, env))
    loop = sum(per_repo)
    print(f"{len(models)} stand-ins of {manifest_path.name}")
    print(f"{'':28} {'seconds':>8}")
    print(f"{'standins build (cold cache)':28} {batch:8.1f}")
    print(f"{'standins build (warm cache)':28} {warm:8.1f}")
    print(f"{'make-tiny x ' + str(len(models)) + ' CLI calls':28} {loop:8.1f}   "
          f"({min(per_repo):.1f}-{max(per_repo):.1f} s each)")  # fmt: skip
    print(f"ratio loop / batch: {loop / batch:.1f}x (goal: batch <= 30 s vs ~290 s)")


if __name__ == "__main__":
    main()
