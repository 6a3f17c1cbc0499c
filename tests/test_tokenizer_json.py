"""Properties of the structured JSON shrink, on real tokenizer.json documents."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizer_sources import hub

from tinykit.tokenizer.edit import (
    model_vocab,
    processor_tokens,
    shrink_json,
    tokenizer_kind,
    vocab_size,
)

REPOS = [
    "openai-community/gpt2-xl",
    "google-bert/bert-base-uncased",
    "google-t5/t5-base",
    "meta-llama/Llama-2-7b-hf",
    "facebook/bart-large-cnn",
]


@pytest.fixture(scope="module")
def documents():
    from tokenizers import Tokenizer

    return {
        r: json.loads(Tokenizer.from_file(str(hub(r) / "tokenizer.json")).to_str()) for r in REPOS
    }


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(repo=st.sampled_from(REPOS), vocab=st.integers(400, 4000))
def test_shrink_keeps_ids_compact_and_everything_consistent(documents, repo, vocab):
    from tokenizers import Tokenizer

    src = documents[repo]
    essential = processor_tokens(src)
    new, old_to_new, dropped = shrink_json(src, vocab, essential)
    size = vocab_size(new)
    assert size == len(old_to_new) <= vocab
    assert sorted(old_to_new.values()) == list(range(size))  # compact, no id used twice
    # the same token text at the old and the new id
    old_vocab, new_vocab = model_vocab(src), model_vocab(new)
    old_added = {a["id"]: a["content"] for a in src["added_tokens"]}
    new_added = {a["id"]: a["content"] for a in new["added_tokens"]}
    for old, n in old_to_new.items():
        before = old_added.get(old) or old_vocab[old]
        after = new_added.get(n) or new_vocab[n]
        assert before == after
    kept = set(new_vocab)
    for a, b in new["model"].get("merges", []):
        assert a in kept and b in kept and a + b in kept
    assert essential <= set(new_added.values()) | kept
    assert tokenizer_kind(new) == tokenizer_kind(src)
    tok = Tokenizer.from_str(json.dumps(new))  # tokenizers accepts the document
    assert tok.get_vocab_size() == size
    assert max(tok.encode("Hello world, 2024!").ids) < size
    assert not dropped or len(src["added_tokens"]) > vocab // 8


@pytest.mark.parametrize(
    "repo", sorted({*REPOS, "tiiuae/falcon-180B-chat", "mistralai/Mixtral-8x7B-v0.1"})
)
def test_a_tokenizer_json_reads_as_tokenizers_writes_it(repo):
    """The read that skips building the model gives tokenizers' own document: vocab, merges as
    pairs, added tokens, defaults filled in, Unigram's scores as tokenizers reads them (T5's
    differ from Python's float() in a quarter of its pieces)."""
    from tokenizers import Tokenizer

    from tinykit.tokenizer.canonical import _quick, read_tokenizer_json

    path = hub(repo) / "tokenizer.json"
    written = json.loads(Tokenizer.from_file(str(path)).to_str())
    assert read_tokenizer_json(path) == written
    assert _quick(path.read_bytes()) == written  # the quick read, not the round trip
    assert json.dumps(_quick(path.read_bytes())) == json.dumps(written)  # -0.0 is not 0.0


def _unigram_text(scores: list[str], **model) -> str:
    """A T5-based tokenizer.json whose Unigram pieces carry `scores`, spelled as given."""
    doc = json.loads((hub("google-t5/t5-base") / "tokenizer.json").read_text())
    pieces = [piece for piece, _ in doc["model"]["vocab"][: len(scores)]]
    vocab = ",".join(f"[{json.dumps(p)},{s}]" for p, s in zip(pieces, scores, strict=True))
    doc["model"] = {"type": "Unigram", "unk_id": 2, "vocab": "VOCAB", **model}
    doc["added_tokens"] = doc["added_tokens"][:3]
    return json.dumps(doc).replace('"VOCAB"', f"[{vocab}]")


_F32 = st.floats(-30, 0, width=32).map(repr)  # SentencePiece's scores, printed as f64
# up to 19 digits, the most serde_json reads into one integer
_DIGITS = st.tuples(st.integers(0, 10**9 - 1), st.integers(0, 10**8 - 1), st.integers(0, 2)).map(
    lambda t: f"-{t[0]}.{'0' * t[2]}{t[1]}"
)
_EXPONENT = st.tuples(st.floats(-9, 9), st.integers(1, 17), st.integers(-290, 290)).map(
    lambda t: f"{t[0]:.{t[1]}f}e{t[2]}"
)


@settings(max_examples=40, deadline=None)
@given(scores=st.lists(st.one_of(_F32, _DIGITS, _EXPONENT), min_size=3, max_size=60))
def test_unigram_scores_read_as_tokenizers_reads_them(scores):
    """Every spelling of a score the quick read takes gives the f64 tokenizers reads (serde_json
    rounds some 17-digit ones differently from Python), so the document is the full read's."""
    from tokenizers import Tokenizer

    from tinykit.tokenizer.canonical import _quick

    text = _unigram_text(scores)
    quick = _quick(text.encode())
    assert quick is not None
    written = json.loads(Tokenizer.from_str(text).to_str())
    assert json.dumps(quick) == json.dumps(written)


@pytest.mark.parametrize(
    ("scores", "model"),
    [
        (["0.0", "-1.5", "0", "-2.5"], {}),  # an integer score
        (["0.0", "-1.5", "-2.5", "-1" + "1" * 19 + ".5"], {}),  # 21 digits: serde's other path
        (["0.0", "-1.5", "-2.5", "-1.5e-400"], {}),  # below 1e-308
        (["0.0", "-1.5", "-2.5"], {"unk_id": 7}),  # no such piece
    ],
)
def test_a_unigram_the_quick_read_cannot_vouch_for_takes_the_round_trip(tmp_path, scores, model):
    from tokenizers import Tokenizer

    from tinykit.tokenizer.canonical import _quick, read_tokenizer_json

    path = tmp_path / "tokenizer.json"
    path.write_text(_unigram_text(scores, **model), encoding="utf-8")
    assert _quick(path.read_bytes()) is None
    try:
        written = json.loads(Tokenizer.from_file(str(path)).to_str())
    except Exception:  # tokenizers rejects the file: so does the read
        with pytest.raises(Exception):  # noqa: B017 - tokenizers raises a bare Exception
            read_tokenizer_json(path)
    else:
        assert read_tokenizer_json(path) == written


def test_a_tokenizer_json_tokenizers_would_renumber_takes_the_round_trip(tmp_path):
    """Added tokens out of tokenizers' order, or a vocab with a hole, are not taken as they are."""
    from tokenizers import Tokenizer

    from tinykit.tokenizer.canonical import _quick, read_tokenizer_json

    doc = json.loads((hub("meta-llama/Llama-2-7b-hf") / "tokenizer.json").read_text())
    doc["added_tokens"].append({**doc["added_tokens"][0], "content": "<new>", "id": 40000})
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc))
    assert _quick(path.read_bytes()) is None
    assert read_tokenizer_json(path) == json.loads(Tokenizer.from_file(str(path)).to_str())
    del doc["added_tokens"][-1]
    doc["model"]["vocab"].pop("▁the")
    assert _quick(json.dumps(doc).encode()) is None


def _vocab_files(tmp_path, repo):
    """`repo`'s vocab.json + merges.txt and tokenizer config, without its tokenizer.json."""
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        if (hub(repo) / name).is_file():
            (tmp_path / name).write_bytes((hub(repo) / name).read_bytes())
    return tmp_path


@pytest.mark.parametrize(
    ("repo", "cls", "quick"),
    [
        ("Qwen/Qwen2.5-VL-7B-Instruct", "Qwen2Tokenizer", True),
        ("openai-community/gpt2-xl", "GPT2Tokenizer", True),
        ("facebook/bart-large-cnn", "RobertaTokenizer", False),  # cls/sep ids: the full read
    ],
)
def test_vocab_files_read_as_their_class_builds_them(tmp_path, repo, cls, quick):
    """vocab.json + merges.txt read without building the BPE give the document the class gives
    (pipeline, options, added tokens and their ids); a post-processor naming ids is not read so."""
    from tokenizers import Tokenizer

    from tinykit.tokenizer.canonical import read_vocab_merges
    from tinykit.tokenizer.train import tokenizer_class

    folder = _vocab_files(tmp_path, repo)
    klass = tokenizer_class(cls)
    read = read_vocab_merges(folder, klass)
    assert (read is not None) == quick
    if quick:  # merges in merges.txt's "a b" spelling: the same tokenizer, written alike
        full = klass.from_pretrained(folder).backend_tokenizer.to_str()
        assert Tokenizer.from_str(json.dumps(read)).to_str() == full
        assert {**read, "model": {**read["model"], "merges": []}} == {
            **json.loads(full),
            "model": {**json.loads(full)["model"], "merges": []},
        }


def test_vocab_files_tokenizers_would_not_read_so_take_the_full_read(tmp_path):
    """A merge with a part outside the vocabulary, a line that is not a pair, or a vocab with a
    hole is left to the class's own read (which says what is wrong); a read for a shrink looks
    a merge's parts up only where the shrink keeps it."""
    from transformers import GPT2Tokenizer

    from tinykit.tokenizer.canonical import read_vocab_merges

    folder = _vocab_files(tmp_path, "openai-community/gpt2-xl")
    merges = (folder / "merges.txt").read_text(encoding="utf-8")
    for bad in ("Ġ he_missing\n", "Ġ t he\n", "Ġt\n", "#version: 0.2\n"):
        (folder / "merges.txt").write_text(merges + bad, encoding="utf-8")
        assert read_vocab_merges(folder, GPT2Tokenizer) is None
        shrink = read_vocab_merges(folder, GPT2Tokenizer, whole=False)
        assert (shrink is not None) == (bad == "Ġ he_missing\n")
    (folder / "merges.txt").write_text(merges, encoding="utf-8")
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    vocab["<hole>"] = len(vocab) + 5
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    assert read_vocab_merges(folder, GPT2Tokenizer) is None


def test_a_damaged_merges_file_is_a_usage_error_where_its_merges_are_all_kept(tmp_path):
    """A merges.txt line naming a token its vocab.json lacks: faithful mode, which keeps every
    merge, stops with one line naming the folder; a tiny build keeps only merges of its own
    tokens, and those are intact."""
    import transformers

    import tinykit
    from tinykit.errors import UsageError

    source = tmp_path / "src"
    source.mkdir()
    for path in hub("Qwen/Qwen2.5-VL-7B-Instruct").iterdir():
        (source / path.name).write_bytes(path.read_bytes())
    lines = (source / "merges.txt").read_text(encoding="utf-8").split("\n")
    lines[90_000] = "zzq qqz"
    (source / "merges.txt").write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(UsageError, match=r"src: its vocab files do not load with Qwen2Tokenizer"):
        tinykit.make_tiny(source, tmp_path / "faithful", mode="faithful")
    assert not (tmp_path / "faithful").exists()
    tiny = tinykit.make_tiny(source, tmp_path / "tiny")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny.path)
    assert tokenizer.decode(tokenizer("zzq qqz")["input_ids"]) == "zzq qqz"


@given(
    pairs=st.lists(
        st.tuples(st.text("ab Ġ", min_size=1, max_size=3), st.text("ab Ġ", min_size=1, max_size=3)),
        max_size=40,
    ),
    kept=st.sets(st.text("ab Ġ", min_size=1, max_size=5), max_size=30),
)
def test_merges_kept_alike_from_lines_and_pairs(pairs, kept):
    """A shrink keeps the same merges, in order, from merges.txt's "a b" lines (looked up whole,
    read as tokenizers reads them: split at the first space) as from those lines split: the
    merges whose parts and result it keeps."""
    from tinykit.tokenizer.edit import _kept_merges

    kept |= {t for a, b in pairs[::3] for t in (a, b, a + b)}  # some merges kept whole
    lines = [f"{a} {b}" for a, b in pairs]
    split = [line.split(" ", 1) for line in lines]
    expected = [[a, b] for a, b in split if a in kept and b in kept and a + b in kept]
    assert _kept_merges(lines, kept) == _kept_merges(split, kept) == expected
