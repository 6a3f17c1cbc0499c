"""Which transformers class a tiny model is built as: the source's own, or one the user names.

`--class NAME` takes any class of the model type's auto mappings (BertModel, LlamaForSequence-
Classification, ...) or any transformers class made for the type's config; `--task TASK` takes
the class transformers' auto mapping of that task gives the type. Task names are derived from
the mapping names (`MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES` -> `token-classification`),
so a task transformers adds is a task here too; a few short aliases keep the common names short.
"""

from __future__ import annotations

import re
from typing import Any

from tinykit._suggest import did_you_mean, hint, normalise
from tinykit.errors import UsageError

# Short names for the mappings whose derived names are awkward (seq-to-seq-causal-lm).
ALIASES = {
    "base": "MODEL_MAPPING_NAMES",
    "feature-extraction": "MODEL_MAPPING_NAMES",
    "seq2seq": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "speech-seq2seq": "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
}
_MAPPING = re.compile(r"MODEL_FOR_(\w+)_MAPPING_NAMES")


def task_mappings() -> dict[str, str]:
    """Task name -> mapping name in transformers.models.auto.modeling_auto."""
    from transformers.models.auto import modeling_auto

    shown = {mapping: alias for alias, mapping in reversed(ALIASES.items())}
    tasks: dict[str, str] = {}
    for name in sorted(dir(modeling_auto)):
        if match := _MAPPING.fullmatch(name):
            tasks[shown.get(name, match.group(1).lower().replace("_", "-"))] = name
    tasks["base"] = "MODEL_MAPPING_NAMES"
    return tasks


def _names(value: Any) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value or ())


def classes_by_task(model_type: str) -> dict[str, tuple[str, ...]]:
    """Task -> the class names transformers maps `model_type` to for that task."""
    from transformers.models.auto import modeling_auto

    out: dict[str, tuple[str, ...]] = {}
    for task, mapping in task_mappings().items():
        names = _names(getattr(modeling_auto, mapping).get(model_type))
        if names:
            out[task] = names
    return out


def check_task(task: str) -> str:
    """`task` as its canonical task name (aliases and case and -/_ normalised), or a one-line
    UsageError."""
    tasks = task_mappings()
    canonical = {mapping: name for name, mapping in tasks.items()}
    every = {**tasks, **ALIASES}
    found = did_you_mean(task, every, n=1)
    if found and normalise(found[0]) == normalise(task):
        return canonical[every[found[0]]]
    raise UsageError(
        f"--task {task!r} is not a transformers task.{hint(task, every)} Known tasks: "
        f"{', '.join(sorted(tasks))}."
    )


def requested_class(
    model_type: str, config_class: type, model_class: str | None, task: str | None
) -> Any | None:
    """The class `model_class` or `task` names for `model_type`, None when neither is given.

    Raises:
        UsageError: an unknown class or task, a class of another model type, or a type without
            a class for the task; the message names what the type does have.
    """
    import transformers

    if model_class is None and task is None:
        return None
    by_task = classes_by_task(model_type)
    known = sorted({name for names in by_task.values() for name in names})
    if model_class is not None:
        cls = getattr(transformers, model_class, None)
        own = _config_of(cls)
        fits = isinstance(cls, type) and (
            model_class in known or (own is not object and issubclass(config_class, own))
        )
        if not fits:
            wrong = (
                f"is a class for another model type ({own.__name__})"
                if isinstance(cls, type) and own is not object
                else "is not a transformers model class"
            )
            raise UsageError(
                f"--class {model_class!r} {wrong}.{hint(model_class, known)} Classes of model_type "
                f"{model_type!r}: {', '.join(known) or '(none in the auto mappings)'}."
            )
        if task is not None:
            name = check_task(task)
            if model_class not in by_task.get(name, ()):
                raise UsageError(
                    f"--class {model_class} is not the {name} class of model_type {model_type!r} "
                    f"({', '.join(by_task.get(name, ())) or 'it has none'}). Pass --class or "
                    "--task, not both."
                )
        return cls
    name = check_task(str(task))
    names = [n for n in by_task.get(name, ()) if hasattr(transformers, n)]
    if not names:
        tasks = ", ".join(f"{t} ({'/'.join(c)})" for t, c in sorted(by_task.items()))
        raise UsageError(
            f"model_type {model_type!r} has no class for --task {name}. Its tasks: {tasks or 'none'}."
        )
    return getattr(transformers, names[0])


def _config_of(cls: Any) -> type:
    config = getattr(cls, "config_class", None)
    return config if isinstance(config, type) else object
