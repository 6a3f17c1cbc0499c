"""BuildChoices: what a tiny model is built as, beyond its sizes (class, task, labels, tokenizer,
front end).

The sizes live in ShrinkSpec; these choices say which class carries them, which tokenizer and
chat template ship, whether the vocab is exact, and which shape preset filled the defaults.
Provenance records the ones that differ from the defaults (tinykit.json `options`, the card,
the rebuild command), so a build without them keeps its bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tinykit.errors import UsageError

# Rebuild-command flag of each choice (bool flags take no value).
FLAGS = {
    "model_class": "--class",
    "task": "--task",
    "num_labels": "--num-labels",
    "exact_vocab": "--exact-vocab",
    "preset": "--preset",
    "tokenizer": "--tokenizer",
    "tokens": "--tokens-from",
    "chat_template": "--chat-template",
    "add_tokens": "--add-token",
    "special_tokens": "--special-token",
    "pooling": "--pooling",
}
# The parts a composed tokenizer (`tokenizer={...}`) names, and the choice each one sets.
TOKENIZER_PARTS = {"vocab": "tokenizer", "tokens": "tokens", "template": "chat_template"}


STRING_CHOICES = (
    "model_class",
    "task",
    "preset",
    "tokenizer",
    "tokens",
    "chat_template",
    "pooling",
)
"""The choices that are a non-empty string, or None."""


@dataclass(frozen=True, kw_only=True)
class BuildChoices:
    model_class: str | None = None
    """A transformers class of the model type, by name (LlamaForSequenceClassification)."""
    task: str | None = None
    """A task of transformers' auto mappings (causal-lm, sequence-classification, base, ...)."""
    num_labels: int | None = None
    """Labels of a classification head: 1..1000."""
    exact_vocab: bool = False
    """Pad the tiny tokenizer to exactly `vocab` ids (tiny mode), so the model vocab is `vocab`."""
    preset: str | None = None
    """A shape preset of recipes/_presets.toml (hub-tiny-random)."""
    tokenizer: str | None = None
    """The tokenizer's source (folder, Hub id or model_type) when it is not the config's: its
    vocabulary, and its tokens unless `tokens` names another source."""
    tokens: str | None = None
    """A folder or Hub id whose tokenizer config, added/special tokens and chat template the
    tokenizer takes (Phi-3's on Llama-2's vocabulary)."""
    chat_template: str | None = None
    """A Jinja file whose text replaces the tokenizer's chat template."""
    add_tokens: tuple[str, ...] = ()
    """Tokens added to the tokenizer as whole tokens (not special)."""
    special_tokens: dict[str, Any] | None = None
    """Special-token roles set on the tokenizer, new tokens added: {"pad_token": "<pad>",
    "additional_special_tokens": ["<|tool|>"]}."""
    pooling: str | None = None
    """Add a sentence-transformers front end with this pooling mode (tinykit.frontend.sentence)."""

    def __post_init__(self) -> None:
        for name in STRING_CHOICES:
            _check_string(name, getattr(self, name))
        if not all(isinstance(t, str) and t for t in self.add_tokens):
            raise UsageError(
                f"add_tokens={list(self.add_tokens)!r} must be non-empty strings, "
                'e.g. add_tokens=["<think>", "</think>"].'
            )
        _check_special_tokens(self.special_tokens)
        _check_num_labels(self.num_labels)
        if not isinstance(self.exact_vocab, bool):
            raise UsageError(f"exact_vocab={self.exact_vocab!r} must be True or False.")

    def changed(self) -> dict[str, Any]:
        """The choices that differ from the defaults, in field order."""
        default = BuildChoices()
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        }

    def flags(self) -> list[str]:
        """The make-tiny flags that repeat these choices."""
        parts: list[str] = []
        for name, value in self.changed().items():
            if value is True:
                parts.append(FLAGS[name])
            elif isinstance(value, tuple):
                parts += [a for item in value for a in (FLAGS[name], item)]
            elif isinstance(value, dict):
                for role, tokens in value.items():
                    for token in tokens if isinstance(tokens, list) else [tokens]:
                        parts += [FLAGS[name], f"{role}={token}"]
            else:
                parts += [FLAGS[name], str(value)]
        return parts


def tokenizer_choices(tokenizer: Any, chat_template: Any) -> dict[str, str | None]:
    """`tokenizer` (a source, or its parts `{vocab, tokens, template}`) and `chat_template` as
    the choices tokenizer, tokens and chat_template."""
    found: dict[str, Any] = {"tokenizer": tokenizer, "tokens": None, "chat_template": None}
    if isinstance(tokenizer, Mapping):
        if unknown := sorted(set(tokenizer) - TOKENIZER_PARTS.keys()):
            raise UsageError(
                f"tokenizer part {unknown[0]!r} is unknown. A composed tokenizer names "
                "vocab = SOURCE, tokens = SOURCE and template = FILE."
            )
        found = {choice: tokenizer.get(part) for part, choice in TOKENIZER_PARTS.items()}
    if chat_template is not None:
        if found["chat_template"] is not None:
            raise UsageError(
                "chat_template is given twice (tokenizer.template and chat_template). Keep one."
            )
        found["chat_template"] = chat_template
    return {k: None if v is None else str(v) for k, v in found.items()}


def _check_string(name: str, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise UsageError(f"{name}={value!r} must be a non-empty string, or None.")


def _check_num_labels(labels: Any) -> None:
    if labels is not None and (
        not isinstance(labels, int) or isinstance(labels, bool) or not 1 <= labels <= 1000
    ):
        raise UsageError(
            f"num_labels={labels!r} must be an integer in [1, 1000]. Pass e.g. --num-labels 2."
        )


def _is_role(role: str, value: Any) -> bool:
    """A `*_token` role with one token, or a `*_tokens` role with a list, of non-empty strings."""
    tokens = value if isinstance(value, list) else [value]
    good = role.endswith("_token") and not isinstance(value, list) or role.endswith("_tokens")
    return good and bool(tokens) and all(isinstance(t, str) and t for t in tokens)


def _check_special_tokens(roles: dict[str, Any] | None) -> None:
    if roles is None:
        return
    for role, value in roles.items() if isinstance(roles, dict) else [("", None)]:
        if not _is_role(role, value):
            raise UsageError(
                f"special_tokens={roles!r} must map roles to tokens, e.g. "
                '{"pad_token": "<pad>", "additional_special_tokens": ["<|tool|>"]}.'
            )
