"""coverage: build and verify every model type of the installed transformers.

By default the text types: those transformers maps to a causal LM, masked LM or seq2seq LM class.
`all_model_types()` adds every other type with a model class, grouped (vision, audio, video,
multimodal) by the task tables transformers lists it in. Each is built from its bare model_type
(class defaults, no network) with the class of its group, and verified on inputs of its modality
(see model/inputs/); the verification holds it to its size budget (model/size.py).
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinykit._progress import steps
from tinykit.coverage.apart import flat_message, is_upstream, missing_package, upstream_error
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
    weight_bytes: int = 0
    processor: str = ""
    """What loads the folder's processor files ('AutoProcessor: Idefics3Processor'); '' none
    shipped; 'fails: ...' where none loads them (frontend/processor_files.py)."""
    needs: str = ""
    """A package this environment lacks that the type needs (timm, natten, ...): set apart from
    pass and fail, the reason saying what failed for want of it."""


GROUPS = ("text", "vision", "audio", "video", "multimodal")
# Task tables (MODEL_FOR_<name>_MAPPING_NAMES) that put a type in a group, tried in this order;
# within a group the first table with the type gives the class it is built with.
GROUP_TABLES = {
    "multimodal": (
        "IMAGE_TEXT_TO_TEXT",
        "MULTIMODAL_LM",
        "VISUAL_QUESTION_ANSWERING",
        "DOCUMENT_QUESTION_ANSWERING",
        "ZERO_SHOT_IMAGE_CLASSIFICATION",
        "ZERO_SHOT_OBJECT_DETECTION",
        "RETRIEVAL",
        "TEXT_RECOGNITION",
    ),
    "video": ("VIDEO_CLASSIFICATION",),
    "audio": (
        "SPEECH_SEQ_2_SEQ",
        "CTC",
        "AUDIO_CLASSIFICATION",
        "AUDIO_FRAME_CLASSIFICATION",
        "AUDIO_XVECTOR",
        "TEXT_TO_SPECTROGRAM",
        "TEXT_TO_WAVEFORM",
        "RNNT",
        "TDT",
    ),
    "vision": (
        "IMAGE_CLASSIFICATION",
        "IMAGE",
        "BACKBONE",
        "DEPTH_ESTIMATION",
        "SEMANTIC_SEGMENTATION",
        "IMAGE_SEGMENTATION",
        "INSTANCE_SEGMENTATION",
        "UNIVERSAL_SEGMENTATION",
        "OBJECT_DETECTION",
        "KEYPOINT_DETECTION",
        "KEYPOINT_MATCHING",
        "MASK_GENERATION",
        "MASKED_IMAGE_MODELING",
        "IMAGE_TO_IMAGE",
        "POSE_ESTIMATION",
        "NORMAL_ESTIMATION",
        "POINTMAP_ESTIMATION",
        "IMAGE_MATTING",
        "CAUSAL_IMAGE_MODELING",
        "TABLE_RECOGNITION",
    ),
}
# Types only in the base-model table are grouped by what their default config describes.
CONFIG_HINTS = (
    ("video", ("num_frames", "tubelet_size")),
    ("audio", ("num_mel_bins", "sampling_rate", "conv_dim", "feature_size")),
    ("vision", ("image_size", "num_channels", "patch_size")),
)


def text_model_types() -> list[str]:
    from transformers.models.auto import modeling_auto

    found: set[str] = set()
    for name in TEXT_MAPPINGS:
        found.update(getattr(modeling_auto, name).keys())
    return sorted(found)


def _table(name: str) -> dict[str, Any]:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, f"MODEL_FOR_{name}_MAPPING_NAMES", {})


def all_model_types() -> dict[str, tuple[str, str]]:
    """Every model type with a model class: type -> (group, class name it is built with)."""
    from transformers.models.auto import modeling_auto

    text = set(text_model_types())
    out: dict[str, tuple[str, str]] = {}
    for group, tables in GROUP_TABLES.items():
        for table in tables:
            for model_type, name in _table(table).items():
                if model_type not in out and isinstance(name, str):
                    out[model_type] = (group, name)
    for model_type in text:  # the text sweep's own class choice (model_class) applies
        out.setdefault(model_type, ("text", ""))
    for model_type, name in modeling_auto.MODEL_MAPPING_NAMES.items():
        if model_type not in out and isinstance(name, str):
            out[model_type] = (_group_from_config(model_type), name)
    return dict(sorted(out.items()))


def _group_from_config(model_type: str) -> str:
    from transformers import CONFIG_MAPPING

    try:
        config = CONFIG_MAPPING[model_type]().to_dict()
    except Exception:  # a default that does not construct is reported by the sweep itself
        return "text"
    subs = {k for k, v in config.items() if isinstance(v, dict) and "model_type" in v}
    if any(k.startswith(("vision", "audio", "image", "speech")) for k in subs) and (
        "vocab_size" in config or any(k.startswith("text") for k in subs)
    ):
        return "multimodal"
    for group, keys in CONFIG_HINTS:
        if any(k in config for k in keys):
            return group
    return "text"


def sweep(
    model_types: list[str] | None = None,
    classes: dict[str, str] | None = None,
    **spec: Any,
) -> Iterator[CoverageRow]:
    """Build + verify each model type, yielding one row each; a failure is recorded, never raised.

    `classes` names the transformers class to build a type with (its group's, from
    `all_model_types`); a type without one gets make-tiny's own choice.
    """
    from tinykit.frontend.processor_files import shipped_processor
    from tinykit.model.build import make_tiny
    from tinykit.model.verify import verify

    _check_known(model_types or [], classes)
    wanted = model_types or text_model_types()
    with (
        tempfile.TemporaryDirectory(prefix="tinykit-coverage-") as tmp,
        steps(len(wanted), "coverage") as step,
    ):
        for model_type in wanted:
            step(model_type)
            started = time.perf_counter()
            ok, reason, params, weights, processor = False, "", 0, 0, ""
            try:  # verify runs here, with its report kept: the build's own check is skipped
                source = _source_folder(Path(tmp), model_type, (classes or {}).get(model_type))
                built = make_tiny(source, Path(tmp) / model_type, check=False, **spec)
                processor = shipped_processor(built.path)
                report = verify(built.path)
                ok, reason = report.ok, "; ".join(report.problems) or "ok"
                params, weights = report.params, report.weight_bytes
            except TinykitError as e:
                reason = f"{type(e).__name__}: {flat_message(e)}"
            except Exception as e:  # a transformers failure on one type must not stop the sweep
                reason = f"{type(e).__name__}: {flat_message(e)[:300]}"
            upstream, needs = False, ""
            if not ok:
                error = upstream_error(model_type, (classes or {}).get(model_type))
                needs = missing_package(reason) or missing_package(error)
                upstream = not needs and is_upstream(reason, error)
                if upstream:
                    reason = f"{reason} [transformers at full size: {error}]"
            seconds = time.perf_counter() - started
            yield CoverageRow(
                model_type, ok, reason, params, seconds, upstream, weights, processor, needs
            )


def _check_known(model_types: list[str], classes: dict[str, str] | None) -> None:
    known = {*text_model_types(), *(classes or {})}
    unknown = [t for t in model_types if t not in known]
    if unknown:  # a typo would otherwise "fail" as a row and the sweep exit 0
        raise UsageError(
            f"Unknown model type(s) {', '.join(unknown)}: transformers maps no causal, masked "
            "or seq2seq LM class to them (nor, with --all, any model class). Run `tinykit "
            "coverage` (or `--all`) without names to see all."
        )


def sweep_in_processes(
    model_types: list[str], classes: dict[str, str] | None, jobs: int
) -> Iterator[CoverageRow]:
    """`sweep` shared among `jobs` worker processes (each pays the imports once and then takes
    one type at a time), rows yielded in the order of `model_types`. Each worker gets its share
    of the CPU's threads, so that the workers do not oversubscribe the cores between them."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    _check_known(model_types, classes)  # a typo fails here, before any process starts
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),  # no forked torch thread pools
        initializer=_worker_setup,
        initargs=(threads,),
    ) as pool:
        yield from pool.map(_sweep_one, model_types, [classes] * len(model_types))


def _worker_setup(threads: int) -> None:
    import os
    import sys

    import torch

    os.dup2(2, 1)  # what model code prints goes to stderr: the parent's stdout is its report
    sys.stdout = sys.stderr

    import tinykit.model.build
    import tinykit.model.verify  # noqa: F401  (imports paid here, not in a type's seconds)

    torch.set_num_threads(threads)


def _sweep_one(model_type: str, classes: dict[str, str] | None) -> CoverageRow:
    return next(sweep([model_type], classes))


def _source_folder(tmp: Path, model_type: str, class_name: str | None) -> str | Path:
    """A bare model_type, or a folder whose config.json names the class to build it with."""
    if not class_name:
        return model_type
    import json

    folder = tmp / f"source-{model_type}"
    folder.mkdir(exist_ok=True)
    config = {"model_type": model_type, "architectures": [class_name]}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def plan(
    model_types: list[str] | None = None, *, every: bool = False, groups: list[str] | None = None
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """What a sweep covers: (types in order, type -> group, type -> class name to build it with).

    `every` (or any `groups`) takes every type with a model class, else the text types only;
    named `model_types` narrow it, `groups` keep only those groups."""
    if every or groups:
        table = all_model_types()
        group_of = {t: g for t, (g, _) in table.items()}
        classes = {t: c for t, (_, c) in table.items() if c}
    else:
        group_of, classes = dict.fromkeys(text_model_types(), "text"), {}
    wanted = model_types or [t for t, g in group_of.items() if g in (groups or GROUPS)]
    return wanted, group_of, classes


def summarize(
    rows: list[CoverageRow], group_of: dict[str, str], wall_seconds: float | None = None
) -> dict[str, Any]:
    """The sweep's report: figures over all rows, the same per group, and every row; with
    `wall_seconds`, the whole sweep's wall time too (with worker processes it is less than
    the per-type seconds added up)."""
    per_group = {}
    for group in GROUPS:
        mine = [r for r in rows if group_of.get(r.model_type) == group]
        if mine:
            per_group[group] = figures(mine)
    return {
        **figures(rows),
        **({"wall_seconds": round(wall_seconds, 1)} if wall_seconds is not None else {}),
        "groups": per_group,
        "rows": [{**dataclasses.asdict(r), "group": group_of.get(r.model_type)} for r in rows],
    }


def figures(rows: list[CoverageRow]) -> dict[str, Any]:
    """Pass counts and rates (of all, and of the types transformers itself builds), the types
    whose processor files load, and timings."""
    passed = sum(r.ok for r in rows)
    upstream = [r.model_type for r in rows if r.upstream]
    needs = {r.model_type: r.needs for r in rows if r.needs}
    buildable = len(rows) - len(upstream) - len(needs)
    return {
        "passed": passed,
        "total": len(rows),
        "rate": round(passed / max(1, len(rows)), 4),
        "upstream_broken": upstream,
        "needs_package": needs,
        "buildable": buildable,
        "rate_buildable": round(passed / max(1, buildable), 4),
        "processors": sum(bool(r.processor) and not r.processor.startswith("fails") for r in rows),
        "median_seconds": round(statistics.median([r.seconds for r in rows]), 3) if rows else 0.0,
        "seconds": round(sum(r.seconds for r in rows), 1),
    }


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """One line per group and one for all: the figures `tinykit coverage` prints last."""
    return [
        f"{group}: {s['passed']}/{s['total']} pass ({100 * s['rate']:.1f}%); "
        f"{s['passed']}/{s['buildable']} ({100 * s['rate_buildable']:.1f}%) of the types whose "
        f"own default transformers builds; {s['seconds']:.0f} s, median "
        f"{s['median_seconds']:.2f} s per type; {s['processors']} ship processor files that load"
        + (
            f" (not buildable upstream: {', '.join(s['upstream_broken'])})"
            if s["upstream_broken"]
            else ""
        )
        + _needs_note(s["needs_package"])
        for group, s in [*summary["groups"].items(), ("all", summary)]
    ] + ([f"wall time: {summary['wall_seconds']:.0f} s"] if "wall_seconds" in summary else [])


def _needs_note(needs: dict[str, str]) -> str:
    """` (needs natten: c) (needs timm: a, b)`: the types set apart for want of a package."""
    by_package: dict[str, list[str]] = {}
    for model_type, package in needs.items():
        by_package.setdefault(package, []).append(model_type)
    return "".join(f" (needs {p}: {', '.join(types)})" for p, types in sorted(by_package.items()))
