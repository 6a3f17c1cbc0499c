"""`tinykit fixtures compat`: which named fixtures build, load and give the same logits per version.

For each version of a package (transformers by default) a fresh interpreter runs in that
version's cached overlay (the one `tinykit bisect versions` uses) and, per named model fixture,
builds it (the artifact cache is keyed by package versions, so each version builds its own),
loads it with the class its config names, and hashes the logits of a fixed input. The table puts
the versions side by side; "same logits" compares the hashes across every version that got one.
That forward is recorded (`tinykit.record`) in each version, and a fixture whose logits differ
gets the first divergence of its recordings (`tinykit dumps diff`: which module, input or
parameter changed) against the first version with logits, in `divergence` and under the table.

    python -m tinykit.bisect.compat NAME ... [--record DIR]   # the per-version probe, JSON
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tinykit.bisect.envs import overlay
from tinykit.bisect.releases import sort_versions
from tinykit.errors import BisectError

__all__ = ["CompatResult", "fixtures_compat"]


@dataclass
class CompatResult:
    package: str
    versions: list[str]
    # fixture -> version -> {"build": "ok"|error, "load": ..., "logits": sha256 | None}
    cells: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # fixture -> version -> the first divergence of its recorded forward against the first
    # version with logits (only where the logits differ)
    divergence: dict[str, dict[str, str]] = field(default_factory=dict)

    def same_logits(self, name: str) -> bool | None:
        hashes = {c.get("logits") for c in self.cells[name].values() if c.get("logits")}
        return None if not hashes else len(hashes) == 1

    @property
    def ok(self) -> bool:
        return all(
            c.get("load") == "ok" and self.same_logits(n) is not False
            for n, row in self.cells.items()
            for c in row.values()
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "same_logits": {n: self.same_logits(n) for n in self.cells}}

    def markdown(self) -> str:
        head = f"| fixture | {' | '.join(f'{self.package} {v}' for v in self.versions)} | same logits |"
        lines = [head, "|---" * (len(self.versions) + 2) + "|"]
        for name, row in self.cells.items():
            shown = []
            for v in self.versions:
                c = row.get(v, {})
                if c.get("build") != "ok":
                    shown.append(f"build failed: {c.get('build', 'not run')}"[:60])
                elif c.get("load") != "ok":
                    shown.append(f"load failed: {c.get('load')}"[:60])
                else:
                    shown.append(f"ok {c['logits'][:10]}" if c.get("logits") else "ok (no logits)")
            same = {True: "yes", False: "NO", None: "-"}[self.same_logits(name)]
            lines.append(f"| {name} | {' | '.join(shown)} | {same} |")
        for name, per_version in self.divergence.items():
            for version, text in per_version.items():
                lines.append(f"{name} {self.package} {version}: {text}")
        return "\n".join(lines)


def fixtures_compat(
    versions: Sequence[str],
    names: Sequence[str] | None = None,
    *,
    package: str = "transformers",
    fixtures_dir: str | None = None,
    find_links: str | None = None,
    index_url: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    artifact_cache: str | os.PathLike[str] | None = None,
) -> CompatResult:
    """The fixtures `names` (default: every model fixture) under each of `versions`.

    `cache_dir` holds the per-version overlays; `artifact_cache` the built fixtures (TINYKIT_CACHE).
    """
    if not versions:
        raise BisectError("give --versions a,b,c: the releases to compare the fixtures under.")
    chosen = sort_versions(versions)
    result = CompatResult(package, chosen)
    probe = [sys.executable, "-m", "tinykit.bisect.compat", *(names or [])]
    if fixtures_dir:
        probe += ["--fixtures-dir", fixtures_dir]
    dumps = Path(tempfile.mkdtemp(prefix="tinykit-compat-"))
    try:
        _run_versions(result, probe, dumps, names, find_links, index_url, cache_dir, artifact_cache)
        _diverging(result, dumps)
    finally:
        shutil.rmtree(dumps, ignore_errors=True)
    return result


def _run_versions(
    result: CompatResult,
    probe: list[str],
    dumps: Path,
    names: Sequence[str] | None,
    find_links: str | None,
    index_url: str | None,
    cache_dir: str | os.PathLike[str] | None,
    artifact_cache: str | os.PathLike[str] | None,
) -> None:
    package = result.package
    for version in result.versions:
        env = overlay(
            package, version, find_links=find_links, index_url=index_url, cache_dir=cache_dir
        )
        if env.failed:
            cells = {n: {"build": f"install failed: {env.error}"} for n in (names or ["*"])}
        else:
            child_env = env.environ()
            if artifact_cache:
                child_env["TINYKIT_CACHE"] = str(artifact_cache)
            record = ["--record", str(dumps / version)]
            done = subprocess.run(probe + record, env=child_env, capture_output=True, text=True)
            lines = done.stdout.strip().splitlines()
            if done.returncode != 0 or not lines:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                cells = {n: {"build": f"probe failed: {last}"} for n in (names or ["*"])}
            else:
                cells = json.loads(lines[-1])
        for name, cell in cells.items():
            result.cells.setdefault(name, {})[version] = cell


def _diverging(result: CompatResult, dumps: Path) -> None:
    """The first divergence of each fixture whose logits differ, against the first version."""
    from tinykit.errors import UsageError
    from tinykit.numerics.diff import diff_dumps

    for name, row in result.cells.items():
        if result.same_logits(name) is not False:
            continue
        with_logits = [v for v in result.versions if row.get(v, {}).get("logits")]
        ref = with_logits[0]
        for version in with_logits[1:]:
            if row[version]["logits"] == row[ref]["logits"]:
                continue
            try:
                text = diff_dumps(dumps / ref / name, dumps / version / name).text()
                text = f"against {ref}, " + text.splitlines()[0]
            except UsageError as e:
                text = f"against {ref}, not comparable: {e}"
            result.divergence.setdefault(name, {})[version] = text


def _logits_digest(model: Any, record_to: Path | None = None) -> str | None:
    """sha256 of the logits on make_inputs' seeded inputs (one sample of 8 tokens, and the
    pixels or audio the model reads); None when they cannot be made or run, or give no logits.
    `record_to`: the forward is recorded there (`tinykit.record`)."""
    import contextlib

    import torch

    from tinykit.model.inputs import make_inputs
    from tinykit.numerics.record import record

    model.eval()
    try:
        recording = record(model, out=record_to) if record_to else contextlib.nullcontext()
        with torch.no_grad(), recording:
            out = model(**make_inputs(model, batch=1, seq=8).forward)
    except Exception:  # a cell of the table (not compared), not a crash of the probe
        return None
    logits = getattr(out, "logits", None)
    if logits is None:
        return None
    return hashlib.sha256(logits.detach().float().contiguous().numpy().tobytes()).hexdigest()


def _probe(argv: list[str]) -> dict[str, dict[str, Any]]:
    from tinykit.artifacts import named
    from tinykit.artifacts.kinds import KINDS, MODEL
    from tinykit.model.load import load_model

    folder = record_dir = None
    if "--fixtures-dir" in argv:
        i = argv.index("--fixtures-dir")
        folder, argv = argv[i + 1], argv[:i] + argv[i + 2 :]
    if "--record" in argv:
        i = argv.index("--record")
        record_dir, argv = Path(argv[i + 1]), argv[:i] + argv[i + 2 :]
        record_dir.mkdir(parents=True, exist_ok=True)
    specs = [
        s for s in named.select(named.load_specs(folder), argv or None) if KINDS[s.kind] is MODEL
    ]
    cells: dict[str, dict[str, Any]] = {}
    for spec in specs:
        cell: dict[str, Any] = {}
        cells[spec.name] = cell
        try:
            path = named.build_one(spec)
            cell["build"] = "ok"
        except Exception as e:  # a cell of the table, not a crash of the probe
            cell["build"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
            continue
        try:
            model = load_model(path)
            cell["load"] = "ok"
        except Exception as e:
            cell["load"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
            continue
        cell["logits"] = _logits_digest(model, record_dir / spec.name if record_dir else None)
    return cells


if __name__ == "__main__":
    print(json.dumps(_probe(sys.argv[1:])))
