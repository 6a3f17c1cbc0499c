"""coverage: build and verify every text model type of the installed transformers.

A model type counts when transformers maps it to a causal LM, masked LM or seq2seq LM class;
each is built from its bare model_type (class defaults, no network) and verified.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinykit.errors import TinykitError, UsageError

TEXT_MAPPINGS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
)


@dataclass
class CoverageRow:
    model_type: str
    ok: bool
    reason: str
    params: int
    seconds: float
    upstream: bool = False
    """The failure is transformers' own: its default config of this type does not build."""


def text_model_types() -> list[str]:
    from transformers.models.auto import modeling_auto

    found: set[str] = set()
    for name in TEXT_MAPPINGS:
        found.update(getattr(modeling_auto, name).keys())
    return sorted(found)


def sweep(model_types: list[str] | None = None, **spec: Any) -> Iterator[CoverageRow]:
    """Build + verify each model type, yielding one row each; a failure is recorded, never raised."""
    from tinykit.model.build import build
    from tinykit.model.verify import verify

    known = text_model_types()
    unknown = [t for t in model_types or [] if t not in known]
    if unknown:  # a typo would otherwise "fail" as a row and the sweep exit 0
        raise UsageError(
            f"Unknown text model type(s) {', '.join(unknown)}: transformers maps no causal, "
            "masked or seq2seq LM class to them. Run `tinykit coverage` without names to see all."
        )
    with tempfile.TemporaryDirectory(prefix="tinykit-coverage-") as tmp:
        for model_type in model_types or text_model_types():
            started = time.perf_counter()
            ok, reason, params = False, "", 0
            try:
                report = verify(build(model_type, Path(tmp) / model_type, **spec).path)
                ok, reason, params = report.ok, "; ".join(report.problems) or "ok", report.params
            except TinykitError as e:
                reason = f"{type(e).__name__}: {e}"
            except Exception as e:  # a transformers failure on one type must not stop the sweep
                reason = f"{type(e).__name__}: {str(e)[:300]}"
            upstream = not ok and _default_is_broken(model_type)
            yield CoverageRow(
                model_type, ok, reason, params, time.perf_counter() - started, upstream
            )


def _default_is_broken(model_type: str) -> bool:
    """Whether transformers cannot build this type from its own default config, at full size on the
    meta device, with the class make-tiny picks: then no shrink can work, and the sweep reports
    the type apart."""
    import torch

    from tinykit.model.build import config_for, model_class
    from tinykit.model.config import load_config
    from tinykit.source import Source

    try:
        config = load_config({"model_type": model_type})
        cls = model_class(
            Source("model_type", model_type, None, {"model_type": model_type}, ""), config, False
        )
        with torch.device("meta"):
            cls._from_config(config_for(cls, config))
    except Exception:  # any failure of transformers' own defaults
        return True
    return False
