"""Stand-in manifests: parsing errors name the entry and field; build_standins writes a tree that
the loopback Hub serves (branches included) to real clients; discover drafts a manifest from
the repos a real command asked for; tiny_hub.add_manifest serves one in a pytest session."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinykit.errors import UsageError
from tinykit.standins.discover import RepoRequests, discover, draft_manifest, guess_source
from tinykit.standins.draft import DEFAULT_SOURCE
from tinykit.standins.manifest import load_manifest, parse_manifest

# one small model (at main and at refs/pr/1) and one synthetic dataset
MANIFEST = """
[defaults]
seed = 0

[models."hf-internal-testing/tiny-random-gpt2"]
source = "gpt2"
hidden = 16
heads = 2
layers = 1
revisions = ["refs/pr/1"]

[datasets."org/rows"]
features = { text = { _type = "Value", dtype = "string" }, label = { _type = "Value", dtype = "int64" } }
rows = { train = 3, test = 2 }
"""


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """One artifact cache for the module: the plugin test finds the model the build test made."""
    return tmp_path_factory.mktemp("standins-cache")


def _manifest(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "standins.toml"
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[models."o/n"]\nsource = "gpt2"\nhiden = 16\n', r"\[models.\"o/n\"\]: field 'hiden' .*Did you mean 'hidden'"),
        ('[models."o/n"]\nhidden = 16\n', r"\[models.\"o/n\"\]: field 'source' is missing"),
        ('[models."not an id"]\nsource = "gpt2"\n', r"'not an id' is not a Hub repo id"),
        ('[models."o/n"]\nsource = "gpt2"\nrevisions = ["../x"]\n', r"revision '../x' is not a branch"),
        ('[models."o/n"]\nsource = "gpt2"\nsynthetic = true\n', r"field 'synthetic' .* datasets only"),
        ('[models."o/n"]\nsource = "a"\n[models."O/N"]\nsource = "b"\n', r"\[models.\"O/N\"\] is listed twice"),
        ('[datasets."o/d"]\nsource = "x"\nhidden = 2\n', r"field 'hidden' is not a dataset option"),
        ('[model."o/n"]\nsource = "gpt2"\n', r"unknown table \[model\]"),
        ("[defaults]\nseed = 0\n", r"no entries"),
    ],
)  # fmt: skip
def test_a_bad_manifest_names_its_entry_and_field(tmp_path, text, message):
    with pytest.raises(UsageError, match=message) as caught:
        load_manifest(_manifest(tmp_path, text))
    assert "\n" not in str(caught.value)


def test_cli_reports_a_bad_manifest_in_one_line_and_writes_nothing(tmp_path):
    path = _manifest(tmp_path, '[models."o/n"]\nsource = "gpt2"\nlayerz = 1\n')
    run = subprocess.run(
        [sys.executable, "-m", "tinykit", "standins", "build", str(path), "-o", str(tmp_path / "hub")],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith("tinykit: error:")]
    assert (
        len(errors) == 1 and "field 'layerz'" in errors[0] and "Did you mean 'layers'" in errors[0]
    )
    assert not (tmp_path / "hub").exists()


def test_built_tree_is_served_to_real_clients_and_a_second_build_is_cached(tmp_path, shared_cache):
    import datasets
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from tinykit.hub.client import use_endpoint
    from tinykit.hub.server import HubServer
    from tinykit.standins.build import build_standins

    manifest, cache = _manifest(tmp_path, MANIFEST), shared_cache
    first = build_standins(manifest, tmp_path / "hub", cache_dir=cache)
    assert [(e.repo_id, e.revision, e.cached) for e in first.entries] == [
        ("hf-internal-testing/tiny-random-gpt2", "main", False),
        ("hf-internal-testing/tiny-random-gpt2", "refs/pr/1", True),  # same spec: one build
        ("org/rows", "main", False),
    ]
    assert first.entries[0].detail == "GPT2LMHeadModel"
    assert (
        tmp_path / "hub/_revisions/model/hf-internal-testing/tiny-random-gpt2/refs/pr/1/config.json"
    ).is_file()
    with pytest.raises(UsageError, match="not empty"):
        build_standins(manifest, tmp_path / "hub", cache_dir=cache)
    second = build_standins(manifest, tmp_path / "hub", cache_dir=cache, force=True)
    assert second.built == 0 and second.seconds < first.seconds

    with HubServer(tmp_path / "hub") as hub, use_endpoint(hub.endpoint, cache_dir=tmp_path / "hf"):
        repo = "HF-internal-testing/tiny-random-gpt2"  # ids match case-insensitively
        model = AutoModelForCausalLM.from_pretrained(repo, revision="refs/pr/1")
        assert model.config.n_embd == 16 and model.config.n_layer == 1
        assert AutoConfig.from_pretrained(repo).n_embd == 16
        assert AutoTokenizer.from_pretrained(repo)("hello").input_ids
        rows = datasets.load_dataset("org/rows")
        assert {split: d.num_rows for split, d in rows.items()} == {"train": 3, "test": 2}
        assert set(rows["train"].features) == {"text", "label"}
        with pytest.raises(OSError):
            AutoConfig.from_pretrained(repo, revision="refs/pr/2")  # a branch nobody built
    assert json.loads(json.dumps(second.to_dict()))["cached"] == 3


def test_the_public_hub_server_serves_a_manifest_from_the_cache(tmp_path, shared_cache):
    """`tinykit.HubServer(...).add_manifest(...)` outside pytest: the base server in hub/server
    serves folders only; the public name adds the manifest (tinykit.standins.serve)."""
    import datasets

    import tinykit
    from tinykit.hub import server
    from tinykit.hub.client import use_endpoint

    assert issubclass(tinykit.HubServer, server.HubServer)
    assert not hasattr(server.HubServer, "add_manifest")
    rows_only = MANIFEST[MANIFEST.index('[datasets."org/rows"]') :]  # no model: no torch build
    manifest = _manifest(tmp_path, rows_only)
    (tmp_path / "root").mkdir()
    hf_cache = tmp_path / "hf"
    with (
        tinykit.HubServer(tmp_path / "root") as hub,
        use_endpoint(hub.endpoint, cache_dir=hf_cache),
    ):
        served = hub.add_manifest(manifest, cache_dir=shared_cache)
        assert list(served) == ["org/rows"] and served["org/rows"].is_relative_to(shared_cache)
        rows = datasets.load_dataset("org/rows")
        assert {split: d.num_rows for split, d in rows.items()} == {"train": 3, "test": 2}


def test_a_failing_entry_is_named_and_leaves_no_hub_folder(tmp_path):
    from tinykit.standins.build import build_standins

    path = _manifest(tmp_path, '[models."o/n"]\nsource = "no_such_model_type"\n')
    with pytest.raises(UsageError, match=r'^\[models."o/n"\]: '):
        build_standins(path, tmp_path / "hub", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "hub").exists()


def test_discover_records_what_a_real_command_asks_for(tmp_path):
    script = textwrap.dedent(
        """
        from huggingface_hub import hf_hub_download
        for repo, kw in [("peft-internal-testing/tiny-random-BertForSequenceClassification", {}),
                         ("hf-internal-testing/tiny-random-gpt2", {"revision": "refs/pr/1"}),
                         ("someone/mystery", {}), ("org/data", {"repo_type": "dataset"})]:
            try:
                hf_hub_download(repo, "config.json", **kw)
            except Exception as e:
                print(type(e).__name__)
        """
    )
    out = tmp_path / "draft.toml"
    result = discover([sys.executable, "-c", script], out, passes=1)
    assert result.returncode == 0
    assert set(result.repos) == {
        ("model", "peft-internal-testing/tiny-random-BertForSequenceClassification"),
        ("model", "hf-internal-testing/tiny-random-gpt2"),
        ("model", "someone/mystery"),
        ("dataset", "org/data"),
    }
    draft = load_manifest(out)  # the draft parses: the guessed entries, TODOs commented out
    entries = {e.repo_id: e for e in draft.entries}
    assert set(entries) == {"peft-internal-testing/tiny-random-BertForSequenceClassification", "hf-internal-testing/tiny-random-gpt2", "someone/mystery"}  # fmt: skip
    assert entries["someone/mystery"].source == DEFAULT_SOURCE  # said so in a comment
    bert = entries["peft-internal-testing/tiny-random-BertForSequenceClassification"]
    assert (bert.source, bert.options) == ("bert", {"model_class": "BertForSequenceClassification"})
    assert list(entries["hf-internal-testing/tiny-random-gpt2"].revisions) == ["refs/pr/1"]
    text = out.read_text()
    assert "# source: no model_type or class in its name" in text
    assert '# [datasets."org/data"]' in text and "# TODO (a dataset: " in text
    assert "# asked for: config.json" in text


@pytest.mark.parametrize(
    ("repo", "guess"),
    [
        ("peft-internal-testing/tiny-random-GPT2LMHeadModel", {"source": "gpt2", "class": "GPT2LMHeadModel"}),
        ("trl-internal-testing/tiny-LlamaForSequenceClassification-3.2", {"source": "llama", "class": "LlamaForSequenceClassification"}),
        ("peft-internal-testing/tiny-random-DebertaV2Model", {"source": "deberta-v2", "class": "DebertaV2Model"}),
        ("peft-internal-testing/tiny-dummy-qwen2", {"source": "qwen2"}),
        ("org/tiny-random-deberta-v2", {"source": "deberta-v2"}),
        ("org/my-model", None),
    ],
)  # fmt: skip
def test_sources_are_guessed_from_repo_names(repo, guess):
    assert guess_source(repo) == guess


_NAME = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)


@settings(max_examples=40, deadline=None)
@given(
    repos=st.dictionaries(
        st.tuples(st.sampled_from(["model", "dataset"]), st.tuples(_NAME, _NAME).map("/".join)),
        st.builds(
            RepoRequests,
            files=st.lists(st.sampled_from(["config.json", "tokenizer.json", "a b.txt"])),
            revisions=st.lists(st.sampled_from(["refs/pr/1", "v2"]), unique=True),
        ),
        max_size=6,
    )
)
def test_every_draft_is_a_valid_manifest_of_its_guessed_models(repos):
    text = draft_manifest(repos, ["pytest", "-k", "it's"])
    data = tomllib.loads(text)
    guessed = {r for (t, r) in repos if t == "model"}  # a name that says nothing: DEFAULT_SOURCE
    assert set(data.get("models", {})) == guessed and "datasets" not in data
    if guessed and len({r.lower() for r in guessed}) == len(guessed):
        assert {e.repo_id for e in parse_manifest(data).entries} == guessed


PLUGIN_TESTS = """
from transformers import AutoConfig

def test_first_loads_the_manifest(tiny_hub):
    served = tiny_hub.add_manifest(MANIFEST)
    assert set(served) == {"hf-internal-testing/tiny-random-gpt2",
                           "hf-internal-testing/tiny-random-gpt2@refs/pr/1", "org/rows"}
    assert AutoConfig.from_pretrained("hf-internal-testing/tiny-random-gpt2").n_embd == 16

def test_second_finds_it_cached(tiny_hub, tinykit_cache):
    builds = len(tinykit_cache.builds())
    tiny_hub.add_manifest(MANIFEST)
    assert len(tinykit_cache.builds()) == builds
    config = AutoConfig.from_pretrained("hf-internal-testing/tiny-random-gpt2", revision="refs/pr/1")
    assert config.n_layer == 1
"""


def test_tiny_hub_serves_a_manifest_for_a_session(pytester, tmp_path, shared_cache):
    manifest = _manifest(tmp_path, MANIFEST)
    pytester.makepyfile(f"MANIFEST = {str(manifest)!r}\n" + PLUGIN_TESTS)
    result = pytester.runpytest_subprocess(f"--tinykit-cache-dir={shared_cache}")
    result.assert_outcomes(passed=2)
