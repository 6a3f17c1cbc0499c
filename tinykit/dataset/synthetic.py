"""`make_synthetic_dataset`: rows drawn from a `Features` schema, for tests that must not
depend on real data.

Rows come from `tinykit.strategies.dataset_row`, drawn outside a Hypothesis test with a
seeded `Random`, so the same schema, seed and library versions give byte-identical files.
Hypothesis normally mixes in constants harvested from whatever modules happen to be
imported; that would make the output depend on the caller's process, so it is switched off.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import tempfile
from collections.abc import Iterator
from pathlib import Path
from random import Random
from typing import Any

from tinykit._files import check_target, output_path
from tinykit.dataset import source as sources
from tinykit.dataset.write import MAX_ROWS, Card, DatasetResult, Split, write_dataset
from tinykit.errors import UsageError

DEFAULT_ROWS = 20
_MAX_ATTEMPTS_PER_ROW = 10


def make_synthetic_dataset(
    features_or_source: Any,
    out: str | os.PathLike[str] | None = None,
    *,
    rows: int = DEFAULT_ROWS,
    seed: int = 0,
    display_source: str | None = None,
    force: bool = False,
) -> DatasetResult:
    """Write a dataset of `rows` synthetic rows per split, loadable with `datasets.load_dataset`.

    `features_or_source` is a `datasets.Features`, its `to_dict()` form, a `.json` file
    holding that form, or a dataset source (Hub id, folder, data files) whose configs, splits
    and features are copied, without any of its rows. `out` (default ./synthetic-dataset)
    must be missing or empty unless `force`; `display_source` is how the card names a
    dataset source (default: as given).
    """
    if isinstance(rows, bool) or not isinstance(rows, int) or rows <= 0:
        raise UsageError(f"rows={rows!r} is not a positive integer. Pass --rows 1 or more.")
    if rows > MAX_ROWS:  # tiny datasets: more is a typo, and would read or draw for minutes
        raise UsageError(
            f"rows={rows} is over the limit of {MAX_ROWS}. Pass --rows {MAX_ROWS} or fewer."
        )
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise UsageError(f"seed={seed!r} is not an integer. Pass e.g. seed=0.")
    out = output_path(out, "synthetic-dataset")
    check_target(out, force)
    schemas, described, revision = _schemas(features_or_source, display_source)
    with _private_hypothesis_home():
        tables = {
            config: [
                Split(split, features, draw_rows(features, rows, f"{seed}/{config}/{split}"))
                for split, features in splits.items()
            ]
            for config, splits in schemas.items()
        }
    import hypothesis

    card = Card(
        title=out.name,
        source=described,
        revision=revision,
        command=_rebuild_command(display_source or features_or_source, rows, seed, out),
        selection=(
            f"Every split holds {rows} synthetic rows drawn from the features by "
            f"`tinykit.strategies.dataset_row` with seed {seed} "
            f"(hypothesis {hypothesis.__version__}). "
            "None of the rows comes from real data."
        ),
    )
    return write_dataset(out, tables, card, force)


@contextlib.contextmanager
def _private_hypothesis_home() -> Iterator[None]:
    """Hypothesis caches unicode tables under ./.hypothesis/: a command must not litter the
    user's working directory, so they go under tinykit's cache (kept: they take seconds to
    compute), or a temp folder where that cannot be written."""
    from hypothesis import configuration

    name = "__hypothesis_home_directory"  # a module global: not name-mangled
    saved = getattr(configuration, name, None)
    root = os.environ.get("TINYKIT_CACHE") or Path.home() / ".cache" / "tinykit"
    with tempfile.TemporaryDirectory(prefix="tinykit-hypothesis-") as tmp:
        home = Path(root) / "hypothesis"
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError:
            home = Path(tmp)
        configuration.set_hypothesis_home_dir(home)
        try:
            yield
        finally:
            setattr(configuration, name, saved)


def draw_rows(features: Any, n: int, seed: int | str) -> list[dict]:
    """`n` rows for `features`, the same for the same seed in any process."""
    from hypothesis.control import BuildContext
    from hypothesis.errors import StopTest, UnsatisfiedAssumption
    from hypothesis.internal.conjecture.data import ConjectureData

    from tinykit.strategies import dataset_row

    rng, strategy = Random(seed), dataset_row(features)
    rows: list[dict] = []
    for _ in range(n * _MAX_ATTEMPTS_PER_ROW):
        if len(rows) == n:
            break
        data = ConjectureData(random=rng, provider=_provider())
        try:
            with BuildContext(data, wrapped_test=draw_rows):  # what @given sets up around a draw
                rows.append(data.draw(strategy))
        except (StopTest, UnsatisfiedAssumption):  # out of choice budget, or a filter said no
            continue
    if len(rows) < n:
        raise UsageError(
            f"Could not draw {n} rows for features {features!r}: the schema is too large to "
            "generate. Reduce nesting or fixed list lengths."
        )
    return rows


def _provider():
    from hypothesis.internal.conjecture.providers import HypothesisProvider

    class SeededProvider(HypothesisProvider):
        """Draws from the seeded random only: no constants from the caller's imported modules."""

        def _maybe_draw_constant(self, *args, **kwargs):
            return None

    return SeededProvider


def _schemas(
    spec: Any, display_source: str | None = None
) -> tuple[dict[str, dict[str, Any]], str, str | None]:
    """{config: {split: Features}}, a description for the card, and a source revision."""
    from datasets import Features

    if isinstance(spec, Features):
        return {"default": {"train": spec}}, "a Features schema", None
    if isinstance(spec, dict):
        return {"default": {"train": _features_from_dict(spec)}}, "a Features schema", None
    path = Path(str(spec))
    if path.is_file() and path.suffix == ".json" and _is_features_file(path):
        return (
            {"default": {"train": _features_from_dict(json.loads(path.read_text()))}},
            path.name,
            None,
        )
    src = sources.resolve(spec)
    schemas: dict[str, dict[str, Any]] = {}
    for config in sources.config_names(src):
        builder = sources.open_config(src, config)
        pools = {s: sources.stream_rows(builder, s, 200) for s in sources.split_names(builder)}
        declared = next((f for f, _ in pools.values() if f is not None), None)
        features = declared or sources.infer_features(
            [r for _, rows in pools.values() for r in rows], f"Config {config!r} of {src.spec!r}"
        )
        schemas[config] = {split: features for split in pools}
    return schemas, f"the schema of `{display_source or src.spec}`", src.revision


def read_features_file(path: str | Path) -> dict:
    """The `Features.to_dict()` mapping in a .json file; anything else is a UsageError (a list
    of rows there would otherwise be taken for a data file, and give another schema)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(
            f"Cannot read --features {str(path)!r}: {e.strerror}. Check the path."
        ) from e
    except ValueError as e:
        raise UsageError(f"--features {str(path)!r} is not JSON: {e}. Fix the file.") from e
    if (
        not isinstance(data, dict)
        or not data
        or not all(isinstance(v, dict) for v in data.values())
    ):
        raise UsageError(
            f"--features {str(path)!r} holds a {type(data).__name__}, not a Features mapping. Pass "
            '`Features.to_dict()` output, e.g. {"text": {"dtype": "string", "_type": "Value"}}.'
        )
    return data


def _is_features_file(path: Path) -> bool:
    """A .json holding a `Features.to_dict()` mapping, rather than json data rows."""
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return False
    # json *data* is a list of rows, or a dict of columns (lists); a schema maps names to dicts
    return isinstance(data, dict) and bool(data) and all(isinstance(v, dict) for v in data.values())


def _features_from_dict(data: dict) -> Any:
    from datasets import Features

    try:
        return Features.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(
            f"Not a valid Features mapping: {e}. Pass `Features.to_dict()` output, e.g. "
            '{"text": {"dtype": "string", "_type": "Value"}}.'
        ) from e


def _rebuild_command(spec: Any, rows: int, seed: int, out: Path) -> str:
    from datasets import Features

    if isinstance(spec, (Features, dict)):
        head = ["tinykit", "make-synthetic-dataset", "--features", "features.json"]
    else:
        head = ["tinykit", "make-synthetic-dataset", str(spec)]
    return shlex.join([*head, "--rows", str(rows), "--seed", str(seed), "-o", out.name])
