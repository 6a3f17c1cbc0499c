"""The `tinykit` pytest plugin (entry point `pytest11`): options, markers, seeding and fixtures.

Loading it must stay cheap and silent: it is auto-loaded in every environment where tinykit
is installed, so nothing here (or in the fixture modules it imports) imports torch,
transformers or datasets at module level, and nothing is printed or seeded unless the session
uses tinykit (a ``--tinykit-*`` option, ``TINYKIT_SEED``, or a test that requests a tinykit
fixture or marker).

Seeding: the session has one seed (random unless given); each test runs under
``(seed + crc32(nodeid)) % 2**32``, so one test's seed does not depend on which others run.
xdist workers get the controller's seed. Reproduce a run with ``--tinykit-seed=<printed value>``
or ``--tinykit-seed=last``.
"""

from __future__ import annotations

import os
import pkgutil
import random
import sys
import zlib
from argparse import ArgumentTypeError
from typing import Any

import pytest

from tinykit.repro.seed import seed_loaded

SEED = pytest.StashKey[int]()
SEED_EXPLICIT = pytest.StashKey[bool]()
ACTIVE = pytest.StashKey[bool]()  # the session uses tinykit: seed tests and print the seed
SEEDED_LATE = pytest.StashKey[set]()  # per test: RNG modules first imported during setup
TEST_SEED = pytest.StashKey[int]()
CACHE_SEED_KEY = "tinykit/seed"
MARKERS = (
    "tinykit_gpu(n=1): needs n visible GPUs (tinykit.testing.requires_gpus); skipped otherwise",
    "tinykit_bf16: needs bfloat16 on the selected device (tinykit.testing.requires_bf16)",
    "tinykit_slow: slow test (tinykit.testing.slow); runs only with TINYKIT_RUN_SLOW=1",
)


def parse_seed(value: str) -> int | str:
    if value == "last":
        return value
    try:
        seed = int(value)
    except ValueError:
        raise ArgumentTypeError(f"{value!r} is not an integer or 'last'") from None
    if not 0 <= seed < 2**32:
        raise ArgumentTypeError(f"{value!r} is outside [0, 2**32)")
    return seed


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tinykit", "tinykit: tiny fixtures and reproducibility")
    group.addoption(
        "--tinykit-seed",
        type=parse_seed,
        default=None,
        metavar="N|last",
        help="session seed; each test runs under seed+crc32(nodeid). 'last' reuses the previous "
        "run's seed. Default: TINYKIT_SEED, else random (printed in the header).",
    )
    group.addoption(
        "--tinykit-cache-dir",
        default=None,
        metavar="DIR",
        help="where built tiny artifacts are cached. Default: TINYKIT_CACHE, "
        "else ~/.cache/tinykit.",
    )
    group.addoption(
        "--tinykit-update-snapshots",
        action="store_true",
        default=False,
        help="rewrite tensor_snapshot golden files instead of comparing with them.",
    )


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    seed, explicit = _session_seed(config)
    config.stash[SEED] = seed
    config.stash[SEED_EXPLICIT] = explicit
    config.stash[ACTIVE] = explicit or any(
        config.getoption(o) for o in ("tinykit_cache_dir", "tinykit_update_snapshots")
    )
    if (cache := getattr(config, "cache", None)) and not hasattr(config, "workerinput"):
        cache.set(CACHE_SEED_KEY, seed)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(), "tinykit-xdist")


def _session_seed(config: pytest.Config) -> tuple[int, bool]:
    if workerinput := getattr(config, "workerinput", None):  # an xdist worker: the controller's
        return workerinput["tinykit_seed"], workerinput["tinykit_seed_explicit"]
    option = config.getoption("tinykit_seed")
    if option is None and (env := os.environ.get("TINYKIT_SEED")):
        try:
            option = parse_seed(env)
        except ArgumentTypeError as e:
            raise pytest.UsageError(
                f"TINYKIT_SEED: {e}. Set an integer, 'last', or unset it."
            ) from None
    if option == "last":
        cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
        last = cache.get(CACHE_SEED_KEY, None) if cache else None
        if last is None:
            raise pytest.UsageError(
                "--tinykit-seed=last: no previous seed is recorded in the pytest cache "
                f"({config.rootpath / '.pytest_cache'}). Run once without it, or pass an integer."
            )
        return int(last), True
    if option is None:
        return random.Random().randrange(10**6), False
    return int(option), True


class XdistHooks:
    """Registered only when xdist is loaded (its hook specs exist only then)."""

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["tinykit_seed"] = node.config.stash[SEED]
        node.workerinput["tinykit_seed_explicit"] = node.config.stash[SEED_EXPLICIT]


def seed_header(config: pytest.Config) -> str:
    seed = config.stash[SEED]
    line = f"tinykit: seed={seed} (reuse: --tinykit-seed={seed} or --tinykit-seed=last)"
    if "torch" in sys.modules:  # never import it just to print a version
        line += f" torch={sys.modules['torch'].__version__}"
    return line


def pytest_report_header(config: pytest.Config) -> str | None:
    return seed_header(config) if config.stash[SEED_EXPLICIT] else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.stash[ACTIVE]:
        config.stash[ACTIVE] = any(uses_tinykit(item) for item in items)


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    if config.stash[ACTIVE] and not config.stash[SEED_EXPLICIT]:
        return seed_header(config)
    return None


def uses_tinykit(item: pytest.Item) -> bool:
    """Whether a test requests a fixture defined by tinykit or carries a ``tinykit_*`` marker."""
    if any(m.name.startswith("tinykit_") for m in item.iter_markers()):
        return True
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info else ()
    return any(d.func.__module__.startswith("tinykit.") for chain in defs for d in chain)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    skip_for_markers(item)
    if item.config.stash[ACTIVE]:
        seed = (item.config.stash[SEED] + zlib.crc32(item.nodeid.encode())) % 2**32
        item.stash[TEST_SEED] = seed
        item.stash[SEEDED_LATE] = {"numpy", "torch"} - set(sys.modules)
        seed_loaded(seed)
        item.user_properties.append(("tinykit_seed", item.config.stash[SEED]))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    # numpy/torch imported by fixtures during setup were not seeded then: seed them now.
    if late := item.stash.get(SEEDED_LATE, set()) & set(sys.modules):
        seed_loaded(item.stash[TEST_SEED], only=late)


def skip_for_markers(item: pytest.Item) -> None:
    from tinykit import testing

    if item.get_closest_marker("tinykit_slow") and not testing.run_slow():
        pytest.skip("slow test: set TINYKIT_RUN_SLOW=1 to run it")
    if mark := item.get_closest_marker("tinykit_gpu"):
        needed = mark.args[0] if mark.args else mark.kwargs.get("n", 1)
        if (found := testing.gpu_count()) < needed:
            pytest.skip(f"needs {needed} GPU(s), found {found}")
    if item.get_closest_marker("tinykit_bf16") and not testing.bf16_supported():
        pytest.skip(f"needs bfloat16 support on device {testing.select_device()!r}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    report = yield
    if report.failed and TEST_SEED in item.stash:
        seed = item.config.stash[SEED]
        report.sections.append(
            (
                "tinykit",
                f"test seed {item.stash[TEST_SEED]} from session seed {seed}. "
                f"Reproduce: pytest '{item.nodeid}' --tinykit-seed={seed}",
            )
        )
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    from tinykit.pytest_plugin.snapshot import WRITTEN

    if written := config.stash.get(WRITTEN, []):
        terminalreporter.write_line(f"tinykit: wrote {len(written)} tensor snapshot(s)")
    # An xdist controller collects nothing itself: print the seed if any worker used it.
    if hasattr(config, "workerinput") or config.stash[SEED_EXPLICIT] or config.stash[ACTIVE]:
        return
    reports = [r for stat in terminalreporter.stats.values() for r in stat]
    properties = [p for r in reports for p in getattr(r, "user_properties", ())]
    if any(name == "tinykit_seed" for name, _ in properties):
        terminalreporter.write_line(seed_header(config))


# Every public module of this package is a fixture module (found automatically; `_*.py` are
# private). pytest imports the modules listed in `pytest_plugins` of a registered plugin.
pytest_plugins = sorted(
    f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")
)
