"""make_synthetic_dataset's rows per split and its role columns: chat messages with valid roles,
prompts, completions and text that a trainer's data code accepts, never None."""

from __future__ import annotations

import datasets
import pytest
from dataset_sources import multi_config_repo
from datasets import ClassLabel, Features, List, Value
from hypothesis import given, settings

import tinykit
from tinykit.cli import main
from tinykit.dataset.roles import WORDS, row_strategy
from tinykit.errors import UsageError

MESSAGES = List({"role": Value("string"), "content": Value("string")})
SFT = Features(
    {"messages": MESSAGES, "text": Value("string"), "label": ClassLabel(names=["a", "b"])}
)
PREFERENCE = Features(
    {"prompt": Value("string"), "chosen": Value("string"), "rejected": Value("string")}
)
CONVERSATIONAL = Features({"prompt": MESSAGES, "chosen": MESSAGES, "rejected": MESSAGES})
SHAREGPT = Features({"conversations": List({"from": Value("string"), "value": Value("string")})})


def assert_conversation(turns, key="role", content="content"):
    roles = [t[key] for t in turns]
    assert turns and set(roles) <= {"system", "user", "assistant"}
    body = roles[1:] if roles[0] == "system" else roles
    assert "system" not in body and body[0] == "user"
    assert all(a != b for a, b in zip(body, body[1:], strict=False)), roles  # alternating
    assert all(isinstance(t[content], str) and t[content].strip() for t in turns)
    return body


QUESTION_WORDS = {"what", "is", "how", "does", "why", "please", "explain", "write", "can", "you"}


def assert_plausible(text):
    assert isinstance(text, str) and text.strip()
    assert all(w.strip(".?").lower() in {*WORDS, *QUESTION_WORDS} for w in text.split()), text


@settings(max_examples=60, deadline=None)
@given(row=row_strategy(SFT))
def test_messages_have_valid_alternating_roles_and_end_with_the_assistant(row):
    body = assert_conversation(row["messages"])
    assert body[-1] == "assistant"
    assert_plausible(row["text"])


@settings(max_examples=40, deadline=None)
@given(row=row_strategy(CONVERSATIONAL))
def test_conversational_preference_prompt_ends_on_user_answers_are_one_assistant_turn(row):
    assert assert_conversation(row["prompt"])[-1] == "user"
    for column in ("chosen", "rejected"):
        assert [t["role"] for t in row[column]] == ["assistant"]


@settings(max_examples=30, deadline=None)
@given(row=row_strategy(SHAREGPT))
def test_sharegpt_keys_get_the_same_roles(row):
    assert_conversation(row["conversations"], key="from", content="value")


def test_preference_dataset_with_rows_per_split_loads_without_none(tmp_path):
    out = tinykit.make_synthetic_dataset(
        PREFERENCE, tmp_path / "pref", rows={"train": 17, "test": 2}, seed=3
    )
    ds = datasets.load_dataset(str(out))
    assert {split: len(rows) for split, rows in ds.items()} == {"train": 17, "test": 2}
    for column in ("prompt", "chosen", "rejected"):
        for text in [*ds["train"][column], *ds["test"][column]]:
            assert_plausible(text)
    assert all(p.endswith("?") for p in list(ds["train"]["prompt"]))
    assert "--rows train=17,test=2" in (out / "README.md").read_text()


def test_rows_per_split_choose_among_a_sources_splits(tmp_path):
    source = multi_config_repo(tmp_path / "src")
    out = tinykit.make_synthetic_dataset(str(source), tmp_path / "synth", rows={"test": 3})
    fake = datasets.load_dataset(str(out), "wine")
    assert list(fake) == ["test"] and len(fake["test"]) == 3
    with pytest.raises(UsageError, match="has train, test"):
        tinykit.make_synthetic_dataset(str(source), tmp_path / "x", rows={"validation": 2})
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("rows", "says"),
    [({}, "names no split"), ({"train": 0}, "rows['train']=0"), ({"a/b": 1}, "bad split")],
)
def test_bad_rows_per_split_are_usage_errors(rows, says, tmp_path):
    with pytest.raises(UsageError, match=says.replace("[", r"\[")):
        tinykit.make_synthetic_dataset(PREFERENCE, tmp_path / "x", rows=rows)


def test_cli_rows_per_split(tmp_path, capsys):
    features = tmp_path / "features.json"
    features.write_text(__import__("json").dumps(SFT.to_dict()))
    out = tmp_path / "d"
    argv = ["make-synthetic-dataset", "--features", str(features), "--rows", "train=5,test=2"]
    assert main([*argv, "-o", str(out), "--json"]) == 0
    assert __import__("json").loads(capsys.readouterr().out)["splits"] == {
        "default": {"train": 5, "test": 2}
    }
