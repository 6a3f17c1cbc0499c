"""Bisect over 20 local releases: cached overlay environments vs a fresh venv per step.

    python benchmarks/bisect_envs.py [--releases 20]

A synthetic package (tkdemo 1.0 ... 1.19, hand-written wheels in a local folder, broken from
1.13) is bisected three ways with the same predicate and the same search:
  cold   tinykit bisect versions with an empty environment cache (one overlay built per step);
  warm   the same bisect again: every environment comes from the cache;
  fresh  a new venv per step (python -m venv, then its pip installs the version), the baseline a
         hand-written bisect script would use.
Reported: per-step cost (median, environment set-up plus predicate) and the total per bisect.
Goal (issue #17): warm >= 5x faster per step than fresh.
"""

from __future__ import annotations

import os
import sys

# This file is named like the stdlib's bisect (which random and tempfile import): keep its own
# folder off sys.path before anything imports it.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # _wheels: the hand-written test wheels

from _wheels import regression_wheels  # noqa: E402

from tinykit.bisect.steps import run_once  # noqa: E402
from tinykit.bisect.versions import bisect_versions, search  # noqa: E402

CHECK = "python -c 'import tkdemo, sys; sys.exit(tkdemo.check())'"


def fresh_bisect(versions: list[str], wheels: Path, root: Path) -> list[float]:
    """The baseline: every tested version gets a brand-new venv with pip."""
    costs: list[float] = []

    def test(version: str) -> str:
        start = time.perf_counter()
        venv = root / f"venv-{version}"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index"]
        subprocess.run([*pip, "--find-links", str(wheels), f"tkdemo=={version}"], check=True)
        env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        run = run_once([CHECK], env)
        costs.append(time.perf_counter() - start)
        return run.outcome

    for end in (versions[0], versions[-1]):  # the ends are checked first, as tinykit does
        test(end)
    search(versions, test)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=20)
    args = parser.parse_args()
    versions = [f"1.{i}" for i in range(args.releases)]
    first_bad = versions[int(args.releases * 0.65)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        regression_wheels(root / "wheels", versions, first_bad=first_bad)
        rows = {}
        for name in ("cold", "warm"):
            start = time.perf_counter()
            result = bisect_versions(
                "tkdemo",
                versions[0],
                versions[-1],
                [CHECK],
                find_links=str(root / "wheels"),
                cache_dir=root / "envs",
                capture_env=False,
            )
            assert result.first_bad == first_bad, result.render()
            rows[name] = ([s.seconds for s in result.steps], time.perf_counter() - start)
        start = time.perf_counter()
        costs = fresh_bisect(versions, root / "wheels", root)
        rows["fresh"] = (costs, time.perf_counter() - start)
    print(f"bisect over {args.releases} releases of tkdemo (first bad {first_bad}), per step:")
    print(f"{'mode':<6} {'steps':>5} {'median/step':>12} {'total':>9}")
    for name, (steps, total) in rows.items():
        print(f"{name:<6} {len(steps):>5} {statistics.median(steps):>11.2f}s {total:>8.1f}s")
    speedup = statistics.median(rows["fresh"][0]) / statistics.median(rows["warm"][0])
    print(f"warm cache vs fresh venv per step: {speedup:.1f}x (goal >= 5x)")


if __name__ == "__main__":
    main()
