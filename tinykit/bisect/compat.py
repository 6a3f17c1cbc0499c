"""`tinykit fixtures compat`: which named fixtures build, load and give the same logits per version.

For each version of a package (transformers by default) a fresh interpreter runs in that
version's cached overlay (the one `tinykit bisect versions` uses) and, per named model fixture,
builds it (the artifact cache is keyed by package versions, so each version builds its own),
loads it with the class its config names, and hashes the logits of a fixed input. The table puts
the versions side by side; "same logits" compares the hashes across every version that got one.

    python -m tinykit.bisect.compat NAME ...   # the per-version probe, prints JSON
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
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
    for version in chosen:
        env = overlay(
            package, version, find_links=find_links, index_url=index_url, cache_dir=cache_dir
        )
        if env.failed:
            cells = {n: {"build": f"install failed: {env.error}"} for n in (names or ["*"])}
        else:
            child_env = env.environ()
            if artifact_cache:
                child_env["TINYKIT_CACHE"] = str(artifact_cache)
            done = subprocess.run(probe, env=child_env, capture_output=True, text=True)
            lines = done.stdout.strip().splitlines()
            if done.returncode != 0 or not lines:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                cells = {n: {"build": f"probe failed: {last}"} for n in (names or ["*"])}
            else:
                cells = json.loads(lines[-1])
        for name, cell in cells.items():
            result.cells.setdefault(name, {})[version] = cell
    return result


def _logits_digest(model: Any) -> str | None:
    """sha256 of the logits on make_inputs' seeded inputs (one sample of 8 tokens, and the
    pixels or audio the model reads); None when they cannot be made or run, or give no logits."""
    import torch

    from tinykit.model.inputs import make_inputs

    model.eval()
    try:
        with torch.no_grad():
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

    folder = None
    if "--fixtures-dir" in argv:
        i = argv.index("--fixtures-dir")
        folder, argv = argv[i + 1], argv[:i] + argv[i + 2 :]
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
        cell["logits"] = _logits_digest(model)
    return cells


if __name__ == "__main__":
    print(json.dumps(_probe(sys.argv[1:])))
