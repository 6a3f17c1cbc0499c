"""`make_synthetic_dataset`: rows drawn from a `Features` schema, for tests that must not
depend on real data.

Rows come from `tinykit.strategies.dataset_row` (columns named for a role from
tinykit.dataset.roles), drawn outside a Hypothesis test with a seeded `Random`, so the same schema, seed and library versions give byte-identical files.
Hypothesis normally mixes in constants harvested from whatever modules happen to be
imported; that would make the output depend on the caller's process, so it is switched off.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from random import Random
from typing import Any

from tinykit._files import check_target, output_path
from tinykit.dataset import source as sources
from tinykit.dataset.write import MAX_ROWS, Card, DatasetResult, Split, write_dataset
from tinykit.errors import UsageError

DEFAULT_ROWS = 20
_MAX_ATTEMPTS_PER_ROW = 10
CONFIG_KEYS = {"features", "rows"}  # of a config in a `{"configs": {...}}` spec


def make_synthetic_dataset(
    features_or_source: Any,
    out: str | os.PathLike[str] | None = None,
    *,
    rows: int | Mapping[str, int] = DEFAULT_ROWS,
    seed: int = 0,
    nulls: bool = True,
    display_source: str | None = None,
    force: bool = False,
) -> DatasetResult:
    """Write a dataset of synthetic rows, loadable with `datasets.load_dataset`.

    `features_or_source` is a `datasets.Features`, its `to_dict()` form, a `.json` file
    holding that form, `{"configs": {name: {"features": ..., "rows": N or {split: N}}}}` (a
    schema and row counts per config; a config without rows gets `rows`), or a dataset source
    (Hub id, folder, data files) whose configs, splits and features are copied, without any of
    its rows. `rows` is the row count of every split,
    or `{split: count}`: the splits to write (a schema gets exactly those; a source's splits
    must include them, and the others are left out). `out` (default ./synthetic-dataset) must
    be missing or empty unless `force`; `display_source` is how the card names a dataset
    source (default: as given).

    `nulls=False` draws no None in any column (by default a non-role column is None now and
    then, an edge case for the code under test; a stand-in of a real dataset has none).

    String columns named for a role (messages/conversations, prompt, completion/chosen/rejected,
    text, ...) hold plausible text and never None; see tinykit.dataset.roles.
    """
    counts = check_rows(rows)
    _check_draw_options(seed, nulls)
    out = output_path(out, "synthetic-dataset")
    check_target(out, force)
    plan = config_schemas(features_or_source, counts)
    if plan is not None:
        described, revision = "a Features schema per config", None
        selection = "The configs hold " + "; ".join(
            f"{config}: " + ", ".join(f"{split} {n}" for split, (_, n) in splits.items())
            for config, splits in plan.items()
        )
    else:
        schemas, described, revision = _schemas(features_or_source, display_source)
        if isinstance(counts, dict):
            schemas = _with_splits(schemas, counts, _is_schema(features_or_source))
        plan = {
            config: {split: (features, _count(counts, split)) for split, features in splits.items()}
            for config, splits in schemas.items()
        }
        selection = _describe(counts)
    tables = _draw_tables(plan, seed, nulls)
    import hypothesis

    card = Card(
        title=out.name,
        source=described,
        revision=revision,
        command=_rebuild_command(display_source or features_or_source, counts, seed, out)
        + ("" if nulls else " --no-nulls"),
        selection=(
            f"{selection} synthetic rows drawn from the features by "
            "`tinykit.strategies.dataset_row` (plausible text in columns named for a role: "
            f"messages, prompt, completion, text, ...) with seed {seed} "
            f"(hypothesis {hypothesis.__version__}). "
            "None of the rows comes from real data."
        ),
    )
    return write_dataset(out, tables, card, force)


def check_rows(rows: Any) -> int | dict[str, int]:
    """`rows` as a count or a {split: count} dict, each in 1..MAX_ROWS; else a UsageError."""
    if isinstance(rows, Mapping):
        if not rows:
            raise UsageError("rows={} names no split. Pass e.g. --rows train=17,test=2.")
        bad = [k for k in rows if not isinstance(k, str) or not k.strip() or "/" in k]
        if bad:
            raise UsageError(
                f"rows names a bad split {bad[0]!r}. Pass e.g. --rows train=17,test=2."
            )
        return {split: _one_count(n, f"rows[{split!r}]") for split, n in rows.items()}
    return _one_count(rows, "rows")


def _one_count(n: Any, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise UsageError(f"{what}={n!r} is not a positive integer. Pass --rows 1 or more.")
    if n > MAX_ROWS:  # tiny datasets: more is a typo, and would read or draw for minutes
        raise UsageError(
            f"{what}={n} is over the limit of {MAX_ROWS}. Pass --rows {MAX_ROWS} or fewer."
        )
    return n


def parse_rows(text: str) -> int | dict[str, int]:
    """`--rows 20` (every split) or `--rows train=17,test=2` (those splits)."""
    if "=" not in text:
        try:
            return int(text)
        except ValueError:
            raise UsageError(
                f"--rows {text!r} is not a number or split=count list. Pass e.g. 20 or "
                "train=17,test=2."
            ) from None
    counts: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        split, _, n = part.partition("=")
        if not n.strip().lstrip("-").isdigit() or split.strip() in counts:
            raise UsageError(
                f"--rows {text!r}: {part!r} is not split=count (or repeats a split). Pass e.g. "
                "train=17,test=2."
            )
        counts[split.strip()] = int(n)
    return counts


def _check_draw_options(seed: Any, nulls: Any) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise UsageError(f"seed={seed!r} is not an integer. Pass e.g. seed=0.")
    if not isinstance(nulls, bool):
        raise UsageError(f"nulls={nulls!r} must be true or false.")


def _draw_tables(
    plan: dict[str, dict[str, tuple[Any, int]]], seed: int, nulls: bool
) -> dict[str, list[Split]]:
    """The rows of every split of every config, each drawn from its own seed."""
    with _private_hypothesis_home():
        return {
            config: [
                Split(
                    split, features, draw_rows(features, n, f"{seed}/{config}/{split}", nulls=nulls)
                )
                for split, (features, n) in splits.items()
            ]
            for config, splits in plan.items()
        }


def config_schemas(
    spec: Any, rows: int | dict[str, int]
) -> dict[str, dict[str, tuple[Any, int]]] | None:
    """`{config: {split: (Features, rows)}}` of a `{"configs": {...}}` spec; None for any other
    spec (a Features mapping with a column named "configs" is not one: its value has no
    "features" key)."""
    configs = _spec_configs(spec)
    if configs is None:
        return None
    plan: dict[str, dict[str, tuple[Any, int]]] = {}
    for name, config in configs.items():
        _check_config(name, config)
        features = config["features"]
        if not hasattr(features, "to_dict"):  # a Features object passes as it is
            features = _features_from_dict(dict(features))
        counts = check_rows(config.get("rows", rows))
        splits = counts if isinstance(counts, dict) else {"train": counts}
        plan[name] = {split: (features, n) for split, n in splits.items()}
    return plan


def _spec_configs(spec: Any) -> Mapping | None:
    """The `configs` table of a `{"configs": {...}}` spec, each config with features; else None."""
    configs = (
        spec.get("configs") if isinstance(spec, Mapping) and set(spec) == {"configs"} else None
    )
    if not isinstance(configs, Mapping) or not configs:
        return None
    ok = all(isinstance(c, Mapping) and "features" in c for c in configs.values())
    return configs if ok else None


def _check_config(name: Any, config: Mapping) -> None:
    if not isinstance(name, str) or not name.strip() or "/" in name or set(config) - CONFIG_KEYS:
        raise UsageError(
            f"configs.{name}: a config is a name (no '/') and a table of features = {{...}} "
            "and rows = N or {split = N}, nothing else."
        )


def _count(counts: int | dict[str, int], split: str) -> int:
    return counts if isinstance(counts, int) else counts[split]


def _describe(counts: int | dict[str, int]) -> str:
    if isinstance(counts, int):
        return f"Every split holds {counts}"
    return "The splits hold " + ", ".join(f"{s}: {n}" for s, n in counts.items()) + ";"


def _with_splits(
    schemas: dict[str, dict[str, Any]], counts: dict[str, int], schema_only: bool
) -> dict[str, dict[str, Any]]:
    """The splits `counts` names: created for a schema, chosen among a source's."""
    out = {}
    for config, splits in schemas.items():
        if schema_only:
            features = next(iter(splits.values()))
            out[config] = {split: features for split in counts}
            continue
        missing = [s for s in counts if s not in splits]
        if missing:
            raise UsageError(
                f"--rows names split {missing[0]!r}, and config {config!r} has "
                f"{', '.join(splits)}. Name those splits, or pass one count for every split."
            )
        out[config] = {split: splits[split] for split in counts}
    return out


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


def draw_rows(features: Any, n: int, seed: int | str, *, nulls: bool = True) -> list[dict]:
    """`n` rows for `features`, the same for the same seed in any process."""
    from hypothesis.control import BuildContext
    from hypothesis.errors import StopTest, UnsatisfiedAssumption
    from hypothesis.internal.conjecture.data import ConjectureData

    from tinykit.dataset.roles import row_strategy

    rng, strategy = Random(seed), row_strategy(features, nulls=nulls)
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
    return _source_schemas(sources.resolve(spec), display_source)


def _source_schemas(
    src: sources.Source, display_source: str | None
) -> tuple[dict[str, dict[str, Any]], str, str | None]:
    """A dataset source's configs and splits, each with its declared (else inferred) features."""
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


def _is_schema(spec: Any) -> bool:
    """A Features schema (object, dict or .json file), not a dataset source with splits."""
    if isinstance(spec, Mapping):
        return True
    path = Path(str(spec))
    return path.is_file() and path.suffix == ".json" and _is_features_file(path)


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


def _rebuild_command(spec: Any, rows: int | dict[str, int], seed: int, out: Path) -> str:
    from datasets import Features

    if isinstance(spec, (Features, dict)):
        head = ["tinykit", "make-synthetic-dataset", "--features", "features.json"]
    else:
        head = ["tinykit", "make-synthetic-dataset", str(spec)]
    count = str(rows) if isinstance(rows, int) else ",".join(f"{s}={n}" for s, n in rows.items())
    return shlex.join([*head, "--rows", count, "--seed", str(seed), "-o", out.name])
