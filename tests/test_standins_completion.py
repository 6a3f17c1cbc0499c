"""Stand-ins that need no hand steps (#27 items 5 and 6): datasets with a schema per config,
`standins build --keep-going`, `pkg:` file options, discover's later passes that serve the
draft's stand-ins, and the sentence-transformers front end a build writes by one rule."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tinykit.errors import UsageError
from tinykit.standins.build import build_standins
from tinykit.standins.discover import discover
from tinykit.standins.draft import DEFAULT_SOURCE, RepoRequests, draft_entries, local_sources
from tinykit.standins.manifest import load_manifest, resolve_path

HUB_FILES = Path(__file__).resolve().parents[1].parent / "shared" / "hub-files"
TEXT = '{ _type = "Value", dtype = "string" }'
CONFIGS = f"""
[datasets."SetFit/multi"]
nulls = false
configs.sst2 = {{ features = {{ text = {TEXT}, label = {{ _type = "Value", dtype = "int64" }} }}, rows = {{ train = 17, test = 2 }} }}
configs.sst5 = {{ features = {{ label_text = {TEXT} }} }}
rows = 3
"""


def _write(tmp_path: Path, text: str, name: str = "standins.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_dataset_entry_declares_several_configs_with_rows_per_split(tmp_path):
    import datasets

    manifest = load_manifest(_write(tmp_path, CONFIGS))
    (entry,) = manifest.entries
    assert entry.kind == "synthetic_dataset" and set(entry.source["configs"]) == {"sst2", "sst5"}
    report = build_standins(manifest, tmp_path / "hub", cache_dir=tmp_path / "cache")
    folder = report.entries[0].path
    sst2 = datasets.load_dataset(str(folder), "sst2")
    assert {s: len(sst2[s]) for s in sst2} == {"train": 17, "test": 2}
    assert None not in sst2["train"]["label"]  # nulls = false
    sst5 = datasets.load_dataset(str(folder), "sst5")
    assert {s: len(sst5[s]) for s in sst5} == {"train": 3}  # the entry's rows
    assert sst5["train"].column_names == ["label_text"]


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ('configs.a = { features = { t = { _type = "Value", dtype = "string" } }, row = 2 }', "configs.a: a config is"),
        ('configs.a = { features = { t = { _type = "Value", dtype = "string" } }, rows = 0 }', "not a positive integer"),
        ('configs.a = { features = { t = { _type = "Nope" } } }', "Not a valid Features mapping"),
    ],
)  # fmt: skip
def test_a_bad_config_is_one_line_naming_it(tmp_path, configs, message):
    path = _write(tmp_path, f'[datasets."o/d"]\n{configs}\n')
    with pytest.raises(UsageError, match=message):
        build_standins(path, tmp_path / "hub", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "hub").exists()


def test_keep_going_builds_the_good_entries_and_names_every_bad_one(tmp_path):
    path = _write(
        tmp_path,
        f"""
        [datasets."o/bad-one"]
        features = {{ t = {{ _type = "Nope" }} }}
        [datasets."o/good"]
        features = {{ t = {TEXT} }}
        rows = 2
        [datasets."o/bad-two"]
        configs.x = {{ features = {{ t = {TEXT} }}, rows = -1 }}
        """,
    )
    report = build_standins(path, tmp_path / "hub", cache_dir=tmp_path / "cache", keep_going=True)
    assert [e.repo_id for e in report.entries] == ["o/good"]
    assert [line.split(":")[0] for line in report.failed] == [
        '[datasets."o/bad-one"]',
        '[datasets."o/bad-two"]',
    ]
    assert (tmp_path / "hub" / "datasets" / "o" / "good" / "README.md").is_file()
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "tinykit",
            "standins",
            "build",
            str(path),
            "-o",
            str(tmp_path / "h2"),
        ]
        + ["--keep-going", "--cache-dir", str(tmp_path / "cache")],
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 1
    assert cli.stdout.count("FAILED [datasets.") == 2 and "o/good: synthetic dataset" in cli.stdout


def test_pkg_paths_resolve_inside_the_installed_package(tmp_path):
    import hypothesis

    found = resolve_path("pkg:hypothesis/strategies/__init__.py", tmp_path)
    assert Path(found) == Path(hypothesis.__file__).parent / "strategies" / "__init__.py"
    with pytest.raises(UsageError, match="no installed package 'no_such_pkg'"):
        resolve_path("pkg:no_such_pkg/x.jinja", tmp_path)
    with pytest.raises(UsageError, match="has no file 'no/such.jinja'"):
        resolve_path("pkg:hypothesis/no/such.jinja", tmp_path)


def test_the_draft_says_why_for_every_inferred_field(tmp_path):
    local = tmp_path / "copies" / "org" / "local-model"
    local.mkdir(parents=True)
    (local / "config.json").write_text('{"model_type": "bert"}')
    repos = {
        ("model", "sentence-transformers/paraphrase-albert-small-v2"): RepoRequests(
            files=["config.json", "modules.json"], missing=["modules.json", "model_head.pkl"]
        ),
        ("model", "someone/mystery"): RepoRequests(files=["config.json"]),
        ("model", "org/Local-Model"): RepoRequests(files=["config.json"]),
        ("dataset", "SetFit/sst5"): RepoRequests(files=["README.md"]),
    }
    entries = draft_entries(repos, local_sources([tmp_path / "copies"]))
    st = entries[("model", "sentence-transformers/paraphrase-albert-small-v2")]
    assert st.fields == {"source": "albert", "pooling": "mean"}
    assert any("asked modules.json" in n for n in st.notes)
    assert any("not built by tinykit: model_head.pkl" in n for n in st.notes)
    assert entries[("model", "someone/mystery")].fields == {"source": DEFAULT_SOURCE}
    assert entries[("model", "org/Local-Model")].fields == {"source": str(local.resolve())}
    dataset = entries[("dataset", "SetFit/sst5")]
    assert dataset.fields is None and "features" in (dataset.todo or "")


FETCHER = """
import json, sys
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError
try:
    hf_hub_download("org/encoder", "config.json")
    modules = json.load(open(hf_hub_download("org/encoder", "modules.json")))
    for module in modules[1:]:
        hf_hub_download("org/encoder", module["path"] + "/config.json")
    hf_hub_download("org/second", "config.json")  # only once the first one loaded
except (EntryNotFoundError, RepositoryNotFoundError) as e:
    print(type(e).__name__, file=sys.stderr)
"""


def test_later_passes_serve_the_draft_and_learn_what_follows(tmp_path):
    out = tmp_path / "draft.toml"
    result = discover([sys.executable, "-c", FETCHER], out, passes=5, cache_dir=tmp_path / "cache")
    # nothing; the encoder (asks modules.json); with its front end (asks org/second); both,
    # and the draft no longer changes
    assert [p["served"] for p in result.passes] == [0, 1, 1, 2]
    assert set(result.repos) == {("model", "org/encoder"), ("model", "org/second")}
    encoder = result.repos[("model", "org/encoder")]
    assert "1_Pooling/config.json" in encoder.files  # asked of the pass-3 front end
    draft = {e.repo_id: e for e in load_manifest(out).entries}
    assert draft["org/encoder"].options == {"pooling": "mean"}
    assert "sentence-transformers loads it (asked modules.json)" in out.read_text()


def test_a_sentence_transformers_front_end_is_fitted_to_the_tiny_model(tmp_path):
    from safetensors import safe_open

    from tinykit.model.build import make_tiny

    plain = make_tiny("bert", tmp_path / "plain", pooling="cls", hidden=32, layers=1)
    assert plain.model_class == "BertModel"  # what sentence-transformers loads (AutoModel)
    modules = json.loads((tmp_path / "plain" / "modules.json").read_text())
    assert [m["path"] for m in modules] == ["", "1_Pooling"]
    pooling = json.loads((tmp_path / "plain" / "1_Pooling" / "config.json").read_text())
    assert pooling["word_embedding_dimension"] == 32 and pooling["pooling_mode_cls_token"] is True
    # a source with its own pipeline (a Dense module of another width) keeps it, re-sized
    source = tmp_path / "source"
    shutil.copytree(tmp_path / "plain", source)
    modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})  # fmt: skip
    (source / "modules.json").write_text(json.dumps(modules))
    (source / "2_Dense").mkdir()
    dense = {"in_features": 32, "out_features": 24, "bias": True, "activation_function": "torch.nn.modules.activation.Tanh"}  # fmt: skip
    (source / "2_Dense" / "config.json").write_text(json.dumps(dense))
    make_tiny(source, tmp_path / "tiny", hidden=16, layers=1)
    tiny = tmp_path / "tiny"
    assert json.loads((tiny / "2_Dense" / "config.json").read_text())["out_features"] == 16
    with safe_open(str(tiny / "2_Dense" / "model.safetensors"), "pt") as f:
        shapes = {k: tuple(f.get_tensor(k).shape) for k in f.keys()}  # noqa: SIM118
    assert shapes == {"linear.weight": (16, 16), "linear.bias": (16,)}
    with pytest.raises(UsageError, match="has its own modules.json"):
        make_tiny(source, tmp_path / "again", pooling="mean")


def test_a_stale_auto_map_on_a_native_type_does_not_block_class(tmp_path):
    from tinykit.model.build import make_tiny

    source = tmp_path / "bert-with-auto-map"
    source.mkdir()
    config = json.loads(
        (HUB_FILES / "google-bert" / "bert-base-uncased" / "config.json").read_text()
    )
    config["auto_map"] = {"AutoModel": "modeling_old.BertModel"}  # written before BERT was native
    (source / "config.json").write_text(json.dumps(config))
    built = make_tiny(source, tmp_path / "out", model_class="BertForSequenceClassification")
    assert built.model_class == "BertForSequenceClassification"
