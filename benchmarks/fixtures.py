"""Benchmark: tinykit's cached model fixtures vs from_pretrained from the loopback Hub.

    python benchmarks/fixtures.py [NAME ...]     # default: every model fixture in fixtures/*.toml

For each fixture, in one process (torch and transformers already imported, so no column pays
the import):
  cold build   build_artifact into an empty cache: make_tiny + write + rename (target <= 1 s)
  warm disk    the tiny_model factory in a new session: cache hit on disk + load (<= 50 ms)
  warm memory  the tiny_model factory again in the same session: a private deep copy (<= 50 ms)
  hub cold     Cls.from_pretrained("tiny/<name>") served by tinykit.hub.server over 127.0.0.1,
               empty Hub download cache (the baseline the issue names)
  hub warm     the same from_pretrained again, Hub download cache warm
Each figure is the median of 5 runs (cold build: 3 runs, each into a new empty cache).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import transformers  # noqa: E402  (imported before timing: no column pays for it)

from tinykit.artifacts import named as fixture_specs  # noqa: E402
from tinykit.artifacts.cache import Cache  # noqa: E402
from tinykit.artifacts.kinds import KINDS, MODEL  # noqa: E402
from tinykit.hub.client import use_endpoint  # noqa: E402
from tinykit.hub.server import HubServer  # noqa: E402
from tinykit.model.load import load_model  # noqa: E402
from tinykit.pytest_plugin.fixtures import Factory, TinyModel  # noqa: E402

RUNS = 5


def median_seconds(fn, runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(spec: fixture_specs.FixtureSpec, hub: HubServer, tmp: Path) -> tuple[float, ...]:
    """(cold build, warm disk, warm memory, hub cold, hub warm) in seconds for one fixture."""
    fresh = (tmp / f"{spec.name}-{i}" for i in range(100))
    cold = median_seconds(lambda: fixture_specs.build_one(spec, Cache(next(fresh))), 3)
    cache = Cache(tmp / f"{spec.name}-0")
    path = fixture_specs.build_one(spec, cache)

    def fixture_call(loaded: dict) -> None:  # what `tiny_model(spec.name)` does in a test
        Factory(TinyModel, "model", cache, (), loaded)(spec.name)

    disk = median_seconds(lambda: fixture_call({}))  # a new session: empty memory layer
    loaded: dict = {}
    fixture_call(loaded)
    memory = median_seconds(lambda: fixture_call(loaded))
    repo = f"tiny/{spec.name}"
    hub.add_model(repo, path)
    cls = getattr(transformers, load_model(path).config.architectures[0])
    hf_caches = (tmp / f"hf-{spec.name}-{i}" for i in range(100))

    def hub_cold() -> None:
        with use_endpoint(hub.endpoint, cache_dir=next(hf_caches)):
            cls.from_pretrained(repo)

    hub_load = median_seconds(hub_cold)
    with use_endpoint(hub.endpoint, cache_dir=tmp / f"hf-{spec.name}-warm"):
        cls.from_pretrained(repo)
        hub_warm = median_seconds(lambda: cls.from_pretrained(repo))
    return cold, disk, memory, hub_load, hub_warm


def main(names: list[str]) -> None:
    transformers.logging.set_verbosity_error()
    named = fixture_specs.select(fixture_specs.load_specs(), names or None)
    specs = [s for s in named if KINDS[s.kind] is MODEL]
    tmp = Path(tempfile.mkdtemp(prefix="tinykit-bench-"))
    # warm-up: the first model build in a process imports the model modules and torch kernels
    start = time.perf_counter()
    fixture_specs.build_one(specs[0], Cache(tmp / "warmup"))
    first_build = time.perf_counter() - start
    (tmp / "hub").mkdir()
    with HubServer(tmp / "hub") as hub:
        rows = [(spec.name, *measure(spec, hub, tmp)) for spec in specs]

    print(
        f"{'fixture':<18} {'cold build':>10} {'warm disk':>10} {'warm mem':>9} "
        f"{'hub cold':>9} {'hub warm':>9} {'hub cold/warm disk':>19} {'hub warm/warm mem':>18}"
    )
    for name, cold, disk, memory, hub_load, hub_warm in rows:
        print(
            f"{name:<18} {cold * 1e3:8.0f}ms {disk * 1e3:8.1f}ms {memory * 1e3:7.1f}ms "
            f"{hub_load * 1e3:7.0f}ms {hub_warm * 1e3:7.0f}ms {hub_load / disk:18.1f}x "
            f"{hub_warm / memory:17.1f}x"
        )
    worst = {
        "cold build": max(r[1] for r in rows),
        "warm disk": max(r[2] for r in rows),
        "warm memory": max(r[3] for r in rows),
    }
    print(
        f"worst: cold build {worst['cold build']:.3f} s (target <= 1 s), warm disk "
        f"{worst['warm disk'] * 1e3:.1f} ms, warm memory {worst['warm memory'] * 1e3:.1f} ms "
        "(target <= 50 ms)"
    )
    print(
        f"first build in this process ({specs[0].name}, after importing torch and transformers): "
        f"{first_build:.2f} s"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
