"""Values for string columns whose name says their role: chat messages, prompts, completions, text.

A trainer's data code reads `messages` as a conversation with valid roles and `prompt`/`chosen`
as text; random unicode and `None` there make it fail before the code under test runs. Columns
named for a role get plausible English (seeded words, so the bytes stay reproducible) and never
`None`; every other column keeps the edge-case values of `tinykit.strategies`.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

CHAT_COLUMNS = {"messages", "conversations", "conversation", "chat", "dialog", "dialogue"}
PROMPT_COLUMNS = {"prompt", "question", "instruction", "query", "input"}
ANSWER_COLUMNS = {"completion", "chosen", "rejected", "response", "answer", "output"}
TEXT_COLUMNS = {"text", "content", "document", "sentence", "context", "summary", "system"}
ROLE_KEYS = ("role", "from")
CONTENT_KEYS = ("content", "value", "text")

_VOCABULARY = (
    "the a small model reads each token and learns which word comes next in the sentence "
    "data training test run loss step batch layer weight value shape file folder cache "
    "quick brown fox jumps over lazy dog river mountain city garden window morning evening "
    "please explain why how what when where who write short list summary story poem email "
    "plan recipe answer question example simple clear good better best first second last "
    "number letter color blue green red warm cold bright quiet busy happy careful useful "
    "tea coffee bread apple orange table chair book paper music song friend teacher student"
)
WORDS = tuple(_VOCABULARY.split())
QUESTION_STARTS = ("What is", "How does", "Why is", "Please explain", "Write", "Can you list")


def _sentence(low: int = 4, high: int = 12) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(WORDS), min_size=low, max_size=high).map(
        lambda words: " ".join(words).capitalize() + "."
    )


def _text() -> st.SearchStrategy[str]:
    return st.lists(_sentence(), min_size=1, max_size=3).map(" ".join)


def _question() -> st.SearchStrategy[str]:
    return st.tuples(
        st.sampled_from(QUESTION_STARTS), st.lists(st.sampled_from(WORDS), min_size=2, max_size=8)
    ).map(lambda pair: f"{pair[0]} {' '.join(pair[1])}?")


def _message_keys(feature: Any) -> tuple[str, str] | None:
    """(role key, content key) of a List of {role, content} string structs, else None."""
    import datasets

    inner = getattr(feature, "feature", None)
    if not isinstance(feature, (datasets.List, datasets.LargeList)) or not isinstance(inner, dict):
        return None
    role = next((k for k in ROLE_KEYS if _is_string(inner.get(k))), None)
    content = next((k for k in CONTENT_KEYS if _is_string(inner.get(k))), None)
    return (role, content) if role and content else None


def _is_string(feature: Any) -> bool:
    import datasets

    return isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")


def _conversation(column: str, keys: tuple[str, str], inner: dict) -> st.SearchStrategy[list]:
    """Turns with valid roles: an optional system turn, then user/assistant pairs; a `prompt`
    column ends on a user turn, an answer column (chosen, rejected, ...) is one assistant turn."""
    from tinykit.strategies import feature_values

    role_key, content_key = keys
    others = {k: f for k, f in inner.items() if k not in keys}

    def turns(draw: Any) -> list[dict]:
        if column in ANSWER_COLUMNS:
            roles = ["assistant"]
        else:
            pairs = draw(st.integers(1, 2))
            roles = (["system"] if draw(st.booleans()) else []) + ["user", "assistant"] * pairs
            if column in PROMPT_COLUMNS:
                roles = roles[:-1]
        out = []
        for role in roles:
            text = draw(_question() if role == "user" else _text())
            extra = {k: draw(feature_values(f, allow_missing=False)) for k, f in others.items()}
            out.append({role_key: role, content_key: text, **extra})
        return out

    return st.composite(lambda draw: turns(draw))()


def role_values(column: str, feature: Any) -> st.SearchStrategy[Any] | None:
    """The strategy for a column whose name gives its role, None for any other column."""
    name = column.lower()
    keys = _message_keys(feature)
    if keys is not None and name in CHAT_COLUMNS | PROMPT_COLUMNS | ANSWER_COLUMNS:
        return _conversation(name, keys, feature.feature)
    if not _is_string(feature):
        return None
    if name in PROMPT_COLUMNS:
        return _question()
    if name in ANSWER_COLUMNS | TEXT_COLUMNS:
        return _text()
    return None


def row_strategy(features: Any, *, nulls: bool = True) -> st.SearchStrategy[dict]:
    """One row: role columns as above, the others from tinykit.strategies.dataset_row (with
    `nulls=False`, never None: a stand-in of real data whose columns are never empty)."""
    from tinykit.strategies import feature_values

    columns = {}
    for name, feature in features.items():
        role = role_values(name, feature)
        columns[name] = feature_values(feature, allow_missing=nulls) if role is None else role
    return st.fixed_dictionaries(columns)
