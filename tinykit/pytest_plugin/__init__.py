"""The `tinykit` pytest plugin (entry point `pytest11`): options, markers, seeding and fixtures.

Loading it must stay cheap: it is auto-loaded in every environment where tinykit is installed,
so nothing here (or in the fixture modules it imports) imports torch, transformers or datasets
at module level.

Seeding is on for every test whenever the plugin is installed, so a test draws the same numbers
alone and inside the suite; opt out with ``-p no:tinykit`` or the ini switch
``tinykit_seed_tests = false``. The session has one seed (random unless given); each test runs
under ``(seed + crc32(nodeid)) % 2**32``, so one test's seed does not depend on which others run.
With pytest-randomly installed its ``--randomly-seed`` is the session seed (one seed to pass).
xdist workers get the controller's seed. Reproduce a run with ``--tinykit-seed=<printed value>``
or ``--tinykit-seed=last`` (the last seed some test actually ran under).
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
ACTIVE = pytest.StashKey[bool]()  # seed tests and print the seed (ini tinykit_seed_tests)
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
    parser.addini(
        "tinykit_seed_tests",
        type="bool",
        default=True,
        help="seed random/numpy/torch before every test (default true; false turns it off)",
    )
    parser.addini(
        "tinykit_fixtures",
        type="paths",
        default=[],
        help="folders of this repo's own named fixtures (*.toml, as tinykit's fixtures/); "
        "a name defined here shadows a shipped fixture of the same name",
    )


@pytest.hookimpl(trylast=True)  # after pytest-randomly's, which settles --randomly-seed
def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    seed, explicit = _session_seed(config)
    config.stash[SEED] = seed
    config.stash[SEED_EXPLICIT] = explicit
    config.stash[ACTIVE] = bool(config.getini("tinykit_seed_tests"))
    if config.stash[ACTIVE] and not hasattr(config, "workerinput"):
        config.pluginmanager.register(SeedStore(config), "tinykit-seed-store")
    if config.stash[ACTIVE] and _randomly(config):
        # pytest-randomly reseeds random/numpy itself after us: hand it the same seed.
        config.option.randomly_seed = seed
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(), "tinykit-xdist")


def _randomly(config: pytest.Config) -> bool:
    """Whether pytest-randomly is loaded and reseeds tests (it has no seed when disabled)."""
    return config.pluginmanager.hasplugin("randomly") and bool(
        getattr(config.option, "randomly_reset_seed", False)
    )


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
    if option is None and _randomly(config) and isinstance(config.option.randomly_seed, int):
        return config.option.randomly_seed, False  # its --randomly-seed, given or drawn
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
    reuse = f"--tinykit-seed={seed} or --tinykit-seed=last"
    if _randomly(config):
        reuse += f"; pytest-randomly: --randomly-seed={seed}"
    line = f"tinykit: seed={seed} (reuse: {reuse})"
    if "torch" in sys.modules:  # never import it just to print a version
        line += f" torch={sys.modules['torch'].__version__}"
    return line


def pytest_report_header(config: pytest.Config) -> str | None:
    return seed_header(config) if config.stash[ACTIVE] else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    skip_for_markers(item)
    if item.config.stash[ACTIVE]:
        seed = (item.config.stash[SEED] + zlib.crc32(item.nodeid.encode())) % 2**32
        item.stash[TEST_SEED] = seed
        item.stash[SEEDED_LATE] = {"numpy", "torch"} - set(sys.modules)
        seed_loaded(seed)
        item.user_properties.append(("tinykit_seed", item.config.stash[SEED]))


class SeedStore:
    """Stores the seed for ``--tinykit-seed=last`` once a test ran under it (xdist workers'
    reports reach the controller's hook too): a session that seeded nothing keeps the old one."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.stored = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.stored or not any(name == "tinykit_seed" for name, _ in report.user_properties):
            return
        if cache := getattr(self.config, "cache", None):
            cache.set(CACHE_SEED_KEY, self.config.stash[SEED])
        self.stored = True


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
    from tinykit.pytest_plugin.snapshot import ACROSS, WRITTEN

    if written := config.stash.get(WRITTEN, []):
        terminalreporter.write_line(f"tinykit: wrote {len(written)} tensor snapshot(s)")
    if across := config.stash.get(ACROSS, []):
        terminalreporter.write_line(
            f"tinykit: {len(across)} tensor snapshot(s) matched another environment's recording "
            "within the cross-environment tolerance; record this one with "
            "--tinykit-update-snapshots"
        )


# Every public module of this package is a fixture module (found automatically; `_*.py` are
# private). pytest imports the modules listed in `pytest_plugins` of a registered plugin.
pytest_plugins = sorted(
    f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")
)
