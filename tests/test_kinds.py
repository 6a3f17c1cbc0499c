"""tinykit.artifacts.kinds: each kind builds through build_artifact from a real source, and its
own check, load and describe work on what it built; a typo'd option is one line naming the
valid ones; the table's rows agree with the builders they name."""

from __future__ import annotations

import inspect
import json

import datasets
import pytest
import transformers
from conftest import HUB_FILES

from tinykit.artifacts.cache import Cache
from tinykit.artifacts.kinds import KINDS, build_artifact, kind_named
from tinykit.errors import UsageError

BERT = HUB_FILES / "google-bert" / "bert-base-uncased"  # config + a real WordPiece tokenizer
FEATURES = {
    "text": {"dtype": "string", "_type": "Value"},
    "label": {"dtype": "int64", "_type": "Value"},
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Cache:
    return Cache(tmp_path_factory.mktemp("kinds-cache"))


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """A real local dataset source: a JSON-lines file of 12 rows."""
    path = tmp_path_factory.mktemp("rows") / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": f"row {i}", "n": i}) + "\n" for i in range(12)))
    return path


def _source(kind: str, rows) -> tuple[object, dict]:
    """A real source of each kind and a small spec for it."""
    return {
        "model": (str(BERT), {"layers": 1}),
        "tokenizer": (str(BERT), {"vocab": 300}),
        "dataset": (str(rows), {"rows": 4}),
        "synthetic_dataset": (FEATURES, {"rows": 5, "seed": 1}),
    }[kind]


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_kind_builds_checks_loads_and_describes_what_it_built(name, cache, rows):
    kind = KINDS[name]
    source, spec = _source(name, rows)
    path = build_artifact(name, source, spec, cache)
    assert build_artifact(name, source, spec, cache) == path  # the second call is a hit
    assert [b["kind"] for b in cache.builds()].count(name) == 1
    assert kind.problems(path) == []
    loaded = kind.load(path)
    shown = kind.describe(path)
    if name == "model":
        assert type(loaded).__name__ == shown == "BertForMaskedLM"
        assert loaded.config.num_hidden_layers == 1
    elif name == "tokenizer":
        assert len(loaded) <= 300 and loaded("hello world")["input_ids"]
        assert isinstance(loaded, transformers.PreTrainedTokenizerBase) and "Bert" in shown
    else:
        assert isinstance(loaded, datasets.DatasetDict)
        assert sum(split.num_rows for split in loaded.values()) == spec["rows"]
        assert shown.endswith("data file(s)")
    meta = json.loads((path.parent / "tinykit-cache.json").read_text())
    assert set(meta["versions"]) == set(kind.versions)  # recorded as the key saw them


def test_a_broken_folder_is_a_finding_of_every_kind_not_a_crash(tmp_path):
    (tmp_path / "config.json").write_text("{ not json")
    for kind in KINDS.values():
        problems = kind.problems(tmp_path)
        assert problems and all(isinstance(p, str) and "\n" not in p for p in problems), kind.name


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_typo_is_one_line_naming_every_valid_option(name, tmp_path):
    kind = KINDS[name]
    typo = sorted(kind.options)[0] + "x"
    with pytest.raises(UsageError) as e:
        build_artifact(name, "anything", {typo: 1}, Cache(tmp_path))
    message = str(e.value)
    assert message.startswith(f"Unknown {name} option(s) {typo}. Valid options: ")
    assert "\n" not in message and all(option in message for option in kind.options)
    assert not (tmp_path / "artifacts").exists()  # nothing was built
    with pytest.raises(UsageError, match=r"Unknown artifact kind 'wheel'\. Expected one of"):
        kind_named("wheel")


def test_the_table_agrees_with_the_builders_it_names():
    for kind in KINDS.values():
        params = inspect.signature(kind.build).parameters
        # the display_source rule is the builder's: it records a source only if it takes one
        assert kind.display_source == ("display_source" in params), kind.name
        assert set(kind.file_options) <= kind.options, kind.name
        assert {"force", "display_source", "push_to_hub"}.isdisjoint(kind.options)
        assert set(kind.fixture_kinds) <= set(KINDS) and kind.repo_type in {"model", "dataset"}
        assert kind.synthetic is None or KINDS[kind.synthetic].features_source
        assert "tinykit" in kind.versions
    assert {"hidden", "layers", "model_class", "chat_template"} <= KINDS["model"].options
