"""transformers configs built as every room builds them: `from_dict` without the step of
transformers' own that buys nothing here (transformers is imported by the call, never here)."""

from __future__ import annotations

from typing import Any


def from_dict(cls: Any, data: dict[str, Any]) -> Any:
    """`cls.from_dict(data)`, without its info-level log line: transformers formats the whole
    config for it whether or not anything logs (a to_json_string that builds a default config to
    diff against: 1.3-5 ms a call, several calls a build). A class with its own from_dict
    (Gemma 3n's, TimmWrapper's) keeps it."""
    from transformers import PretrainedConfig

    inherited = getattr(PretrainedConfig.from_dict, "__func__", None)
    if getattr(cls.from_dict, "__func__", None) is inherited:
        return cls(**data)
    return cls.from_dict(data)
