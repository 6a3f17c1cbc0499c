"""BuildChoices: what a tiny model is built as, beyond its sizes (class, task, labels, tokenizer,
front end).

The sizes live in ShrinkSpec; these choices say which class carries them, which tokenizer and
chat template ship, whether the vocab is exact, and which shape preset filled the defaults.
Provenance records the ones that differ from the defaults (tinykit.json `options`, the card,
the rebuild command), so a build without them keeps its bytes.
"""

from __future__ import annotations

import dataclasses
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
    "chat_template": "--chat-template",
    "pooling": "--pooling",
}


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
    """The tokenizer's source (folder, Hub id or model_type) when it is not the config's."""
    chat_template: str | None = None
    """A Jinja file whose text replaces the tokenizer's chat template."""
    pooling: str | None = None
    """Add a sentence-transformers front end with this pooling mode (tinykit.model.sentence)."""

    def __post_init__(self) -> None:
        for name in ("model_class", "task", "preset", "tokenizer", "chat_template", "pooling"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise UsageError(f"{name}={value!r} must be a non-empty string, or None.")
        labels = self.num_labels
        if labels is not None and (
            not isinstance(labels, int) or isinstance(labels, bool) or not 1 <= labels <= 1000
        ):
            raise UsageError(
                f"num_labels={labels!r} must be an integer in [1, 1000]. Pass e.g. --num-labels 2."
            )
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
            parts += [FLAGS[name]] if value is True else [FLAGS[name], str(value)]
        return parts
