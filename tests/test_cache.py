"""tinykit.artifacts.cache: content keys, one build per key across processes, atomic folders, ls/clear."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers
from conftest import HUB_FILES

import tinykit
from tinykit._progress import to_stderr
from tinykit.artifacts import cache as tk_cache
from tinykit.artifacts.cache import META_FILE, Cache
from tinykit.artifacts.kinds import KINDS, build_artifact
from tinykit.cli import main
from tinykit.errors import CacheEntryCorrupt, UsageError

QWEN3 = HUB_FILES / "Qwen" / "Qwen3-8B"  # config.json only
QWEN_VL = HUB_FILES / "Qwen" / "Qwen2.5-VL-7B-Instruct"  # its tokenizer files


def write_file(folder, name="weights.bin", data=b"abc"):
    (folder / name).write_bytes(data)


def test_key_depends_on_kind_source_spec_and_revision(tmp_path):
    c = Cache(tmp_path)
    base = c.key("model", "qwen3_moe", {"layers": 2, "hidden": 64})
    assert base == c.key("model", "qwen3_moe", {"hidden": 64, "layers": 2})  # order-free
    others = [
        c.key("tokenizer", "qwen3_moe", {"layers": 2, "hidden": 64}),
        c.key("model", "qwen3", {"layers": 2, "hidden": 64}),
        c.key("model", "qwen3_moe", {"layers": 3, "hidden": 64}),
        c.key("model", "qwen3_moe", {"layers": 2, "hidden": 64}, revision="abc123"),
    ]
    assert len({base, *others}) == 5


def test_key_covers_the_versions_that_change_bytes():
    import hypothesis
    import pyarrow

    versions = KINDS["model"].key_versions()
    assert versions["torch"] == torch.__version__
    assert versions["transformers"] == transformers.__version__
    assert versions["tinykit"] == tinykit.__version__
    assert {"tokenizers", "safetensors"} <= set(versions)
    # datasets, pyarrow and hypothesis decide a synthetic dataset's bytes
    synthetic = KINDS["synthetic_dataset"].key_versions()
    assert synthetic["hypothesis"] == hypothesis.__version__
    assert synthetic["pyarrow"] == pyarrow.__version__ and "datasets" in synthetic
    assert "torch" not in synthetic and "hypothesis" not in KINDS["dataset"].key_versions()
    # a version is part of the key: an upgrade of one of them is a new artifact
    c = Cache()
    assert c.key("model", "x", {}, versions=versions) != c.key(
        "model", "x", {}, versions={**versions, "torch": "0.0"}
    )


def test_spelled_out_defaults_give_one_key(tmp_path):
    c = Cache(tmp_path)
    keys = {
        c.key("model", "llama", KINDS["model"].normalise(spec))
        for spec in ({}, {"hidden": 32}, {"hidden": 32, "seed": 0}, {"layers": "auto"})
    }
    assert len(keys) == 1
    model = {"seed": 0, "hidden": 64, "revision": None}
    assert KINDS["model"].normalise(model) == {"hidden": 64}
    assert KINDS["synthetic_dataset"].normalise({"rows": 20, "seed": 0}) == {}
    assert KINDS["tokenizer"].normalise({"vocab": 512, "method": "auto"}) == {"vocab": 512}


def test_a_typo_in_a_spec_fails_before_any_build(tmp_path):
    with pytest.raises(
        UsageError, match=r"Unknown model option\(s\) hiden\. Valid options: .*hidden"
    ):
        build_artifact("model", "llama", {"hiden": 32}, Cache(tmp_path))
    with pytest.raises(UsageError, match=r"Unknown tokenizer option\(s\) vocabb\. Valid options"):
        build_artifact("tokenizer", "llama", {"vocabb": 512}, Cache(tmp_path))
    with pytest.raises(UsageError, match="Unknown artifact kind 'wheel'"):
        build_artifact("wheel", "llama", {}, Cache(tmp_path))
    assert not (tmp_path / "artifacts").exists()


def test_the_same_model_asked_with_and_without_defaults_builds_once(tmp_path):
    c = Cache(tmp_path)
    first = build_artifact("model", "llama", {}, c)
    again = build_artifact("model", "llama", {"hidden": 32, "seed": 0, "dtype": "float32"}, c)
    assert first == again and first.name == "tiny-llama"
    assert (first / "model.safetensors").is_file()
    assert [b["kind"] for b in c.builds()] == ["model"]
    assert json.loads((first / "tinykit.json").read_text())["command"] == "tinykit make-tiny llama"


def test_a_local_source_is_keyed_by_its_content(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    write_file(src, data=b"one")
    c = Cache(tmp_path / "cache")
    before = c.key("model", src, {})
    write_file(src, data=b"two")
    assert c.key("model", src, {}) != before


def test_a_file_the_spec_names_is_keyed_by_its_content(tmp_path):
    """Editing a chat template in place must not hand back the model built with the old one."""
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}A: {{ m.content }}{% endfor %}")
    c = Cache(tmp_path / "cache")
    spec = {"tokenizer": str(QWEN_VL), "chat_template": str(template)}
    first = build_artifact("model", str(QWEN3), spec, c)
    template.write_text("{% for m in messages %}B: {{ m.content }}{% endfor %}")
    second = build_artifact("model", str(QWEN3), spec, c)
    assert first != second and len(c.builds()) == 2
    assert transformers.AutoTokenizer.from_pretrained(second).chat_template.startswith("{% for m")
    assert "B: " in transformers.AutoTokenizer.from_pretrained(second).chat_template
    assert "A: " in transformers.AutoTokenizer.from_pretrained(first).chat_template
    # a value that names no local file (a Hub id) is keyed by the spec alone
    assert tk_cache.option_contents({"tokenizer": "Qwen/Qwen3-8B"}, ["tokenizer"]) == {}


def test_a_spec_that_is_not_json_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"cannot be used as a cache key.*Pass only str, int"):
        Cache(tmp_path).key("model", "llama", {"dtype": object()})


def test_build_runs_once_and_then_hits(tmp_path):
    c = Cache(tmp_path)
    calls = []
    key = c.key("model", "x", {})
    build = lambda out: (calls.append(out), write_file(out))  # noqa: E731
    first = c.get_or_build(key, build, kind="model", source="x")
    second = c.get_or_build(key, build, kind="model", source="x")
    assert first == second == tmp_path / "artifacts" / key / "artifact"
    assert calls == [first]  # complete once the meta file beside it is written
    assert (first / "weights.bin").read_bytes() == b"abc"
    assert json.loads((first.parent / META_FILE).read_text())["source"] == "x"
    assert [b["key"] for b in c.builds()] == [key]


def test_a_failed_build_leaves_nothing_behind(tmp_path):
    c = Cache(tmp_path)

    def broken(out):
        write_file(out)
        raise UsageError("boom")

    with pytest.raises(UsageError, match="boom"):
        c.get_or_build("k" * 64, broken)
    assert list((tmp_path / "artifacts").iterdir()) == []
    assert c.lookup("k" * 64) is None and c.builds() == []


CONCURRENT_BUILD = """
import sys, time
from tinykit.artifacts.cache import Cache
def build(out):
    time.sleep(0.5)  # long enough for the other process to reach the lock
    (out / "weights.bin").write_bytes(b"abc")
print(Cache(sys.argv[1]).get_or_build("k" * 64, build, kind="model", source="x"))
"""


def test_concurrent_processes_build_a_key_once(tmp_path):
    script = tmp_path / "build.py"
    script.write_text(textwrap.dedent(CONCURRENT_BUILD))
    root = tmp_path / "cache"
    command = [sys.executable, str(script), str(root)]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(3)]
    paths = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert paths == {str(root / "artifacts" / ("k" * 64) / "artifact")}
    assert len(Cache(root).builds()) == 1


def test_ls_and_clear(tmp_path):
    c = Cache(tmp_path)
    for source in ("a", "b"):
        c.get_or_build(c.key("model", source, {}), write_file, kind="model", source=source)
    entries = tk_cache.ls(tmp_path)
    assert sorted(e.source for e in entries) == ["a", "b"]
    assert all(e.size_bytes == 3 and e.kind == "model" for e in entries)  # the artifact alone
    assert tk_cache.clear(tmp_path, [entries[0].key[:10]]) == 1
    assert [e.source for e in tk_cache.ls(tmp_path)] == [entries[1].source]
    assert tk_cache.clear(tmp_path) == 1
    assert tk_cache.ls(tmp_path) == [] and c.builds() == []


def test_cli_cache_ls_and_clear(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TINYKIT_CACHE", str(tmp_path))
    c = Cache()
    key = c.key("model", "qwen3", {"layers": 2})
    c.get_or_build(key, write_file, kind="model", source="qwen3")
    assert main(["cache", "ls"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"1 artifact(s) in {tmp_path}\n{key[:12]}  model")
    assert out.rstrip().endswith("qwen3")
    assert main(["cache", "ls", "--json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["key"] == key and entry["spec"] == {}
    assert main(["cache", "clear", "--json", "--cache-dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out) == {"removed": 1, "root": str(tmp_path)}


def _two_files(out):
    (out / "model.safetensors").write_bytes(b"w" * 64)
    (out / "config.json").write_text('{"hidden_size": 32}')


CORRUPTIONS = {
    "truncated": lambda f: (f / "model.safetensors").write_bytes(b"w" * 10),
    "edited": lambda f: (f / "config.json").write_text('{"hidden_size": 64}'),
    "missing": lambda f: (f / "model.safetensors").unlink(),
    "added": lambda f: (f / "stray.bin").write_bytes(b"x"),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_entry_is_rebuilt_on_lookup(tmp_path, corruption, capsys):
    to_stderr()  # as the CLI does: stage lines on stderr
    c = Cache(tmp_path)
    key = c.key("model", "x", {})
    folder = c.get_or_build(key, _two_files, kind="model", source="x")
    recorded = json.loads((folder.parent / META_FILE).read_text())["files"]
    assert sorted(recorded) == ["config.json", "model.safetensors"]
    CORRUPTIONS[corruption](folder)
    assert c.get_or_build(key, _two_files, kind="model", source="x") == folder
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    assert (folder / "model.safetensors").read_bytes() == b"w" * 64
    assert len(c.builds()) == 2  # rebuilt once, then a plain hit again
    assert c.get_or_build(key, _two_files) == folder and len(c.builds()) == 2
    assert f"tinykit: cache entry {key[:12]} is corrupt (" in capsys.readouterr().err


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupt_entry_with_rebuilding_off_names_the_entry_and_the_clear_command(
    tmp_path, corruption, monkeypatch
):
    c = Cache(tmp_path)
    key = c.key("model", "x", {})
    folder = c.get_or_build(key, _two_files, kind="model", source="x")
    CORRUPTIONS[corruption](folder)
    before = sorted((p.name, p.read_bytes()) for p in folder.iterdir())
    monkeypatch.setenv("TINYKIT_CACHE_REBUILD", "0")  # as --no-rebuild sets Cache(rebuild=False)
    for cache in (Cache(tmp_path), Cache(tmp_path, rebuild=False)):
        with pytest.raises(CacheEntryCorrupt) as e:
            cache.get_or_build(key, _two_files)
        assert f"tinykit cache clear {key[:12]}" in str(e.value) and key[:12] in str(e.value)
        assert "\n" not in str(e.value) and e.value.exit_code == 3
    assert sorted((p.name, p.read_bytes()) for p in folder.iterdir()) == before  # left to look at
    assert len(c.builds()) == 1


def test_ls_flags_corrupt_entries_and_survives_unreadable_metadata(tmp_path, capsys):
    c = Cache(tmp_path)
    good, bad, broken = (c.key("model", s, {}) for s in ("good", "bad", "broken"))
    for key, source in ((good, "good"), (bad, "bad"), (broken, "broken")):
        c.get_or_build(key, _two_files, kind="model", source=source)
    (c.path(bad) / "artifact" / "model.safetensors").write_bytes(b"")
    (c.path(broken) / META_FILE).write_text("{not json")
    problems = {e.key: e.problems for e in c.ls()}
    assert problems[good] == ()
    assert problems[bad] == (
        "model.safetensors changed (sha256 e3b0c44298fc, built "
        + json.loads((c.path(bad) / META_FILE).read_text())["files"]["model.safetensors"][:12]
        + ")",
    )
    assert problems[broken] == ("its metadata is unreadable",)
    assert main(["cache", "ls", "--cache-dir", str(tmp_path)]) == 0
    assert "CORRUPT: model.safetensors changed" in capsys.readouterr().out
    assert c.lookup(broken) is None  # unreadable metadata: rebuilt on the next use
