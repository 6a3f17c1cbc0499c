"""make_tiny: source -> shrunk config -> random weights -> an atomically written folder.

tinykit.make_tiny("qwen3_moe", "tiny-qwen3-moe")          # bare model_type: no network
tinykit.make_tiny("../shared/hub-files/Qwen/Qwen3-8B")    # a local folder
tinykit.make_tiny("Qwen/Qwen3-30B-A3B@main", hidden=64)   # a Hub id: config files only
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from tinykit._devices import tiny_threads
from tinykit._files import FolderResult, check_target, output_errors, output_path, replace_folder
from tinykit._progress import stage
from tinykit.errors import TinyArtifactInvalid, UnsupportedModelError, UsageError
from tinykit.model import provenance
from tinykit.model.choices import BuildChoices, tokenizer_choices
from tinykit.model.config import ShrunkConfig, shrink_config
from tinykit.model.shrink.token_ids import remap_token_ids
from tinykit.model.spec import ShrinkOptions, ShrinkSpec
from tinykit.source import Source, resolve

if TYPE_CHECKING:
    from tinykit.frontend.tokenizer import Shipped

# Auto classes tried, in order, for a bare model_type (or architectures transformers lacks).
TASK_MAPPINGS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "MODEL_MAPPING_NAMES",
)


@dataclass(frozen=True)
class Built:
    """What the model build itself produced, before provenance and the rename."""

    model_class: str
    params: int
    layers: dict[str, list[int]]
    options: dict[str, Any] = field(default_factory=dict)
    """The BuildChoices that differ from the defaults, and what they resolved to."""
    model: Any = field(default=None, repr=False, compare=False)
    """The model saved, which the check runs rather than loading it twice."""


@dataclass(frozen=True)
class BuildResult(FolderResult):
    """What make_tiny built; `to_dict()` is the CLI's --json output. Stands in for `path`."""

    path: Path
    model_class: str
    params: int
    bytes: int
    seconds: float
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    layers: dict[str, list[int]] = field(default_factory=dict)
    pushed: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "model_class": self.model_class,
            "params": self.params,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "files": self.files,
            "layers": self.layers,
            "pushed": self.pushed,
        }


def make_tiny(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    force: bool = False,
    revision: str | None = None,
    trust_remote_code: bool = False,
    recipes: tuple[str, ...] = (),
    push_to_hub: str | None = None,
    check: bool = True,
    display_source: str | None = None,
    model_class: str | None = None,
    task: str | None = None,
    num_labels: int | None = None,
    exact_vocab: bool = False,
    preset: str | None = None,
    tokenizer: str | os.PathLike[str] | Mapping[str, str] | None = None,
    chat_template: str | os.PathLike[str] | None = None,
    add_tokens: Sequence[str] | None = None,
    special_tokens: Mapping[str, Any] | None = None,
    pooling: str | None = None,
    **spec: Unpack[ShrinkOptions],
) -> BuildResult:
    """Build a tiny random model of `source` into `out`; return what was built.

    Args:
        source: a folder with config.json, a transformers model_type, or a Hub id `org/name[@rev]`.
        out: the output folder (default `./tiny-<name>`); missing or empty, unless `force`.
        force: replace a non-empty `out`.
        revision: the Hub revision of a Hub id.
        trust_remote_code: allow configs that need the repository's own code.
        recipes: extra recipe files.
        push_to_hub: publish the built folder (with its card) to this repo id.
        check: verify the built model (forward, backward, size budget) before it is moved into
            place; a failing model is never written (`--no-check` skips this).
        display_source: how provenance names the source (default: `source` as given), so that
            a caller passing an absolute path can record the relative one.
        model_class: build as this transformers class of the model type (BertModel,
            LlamaForSequenceClassification); default: the source's `architectures`.
        task: build as the class transformers' auto mapping of this task gives the type
            (causal-lm, masked-lm, seq2seq, sequence-classification, token-classification,
            question-answering, base, ...).
        num_labels: labels of a classification head.
        exact_vocab: pad the tiny tokenizer to exactly `vocab` ids (tiny mode), or fail saying why.
        preset: a shape preset (`hub-tiny-random`: the Hub's tiny-random shapes) whose sizes
            replace the defaults; sizes passed in `spec` still win.
        tokenizer: take the tokenizer and its special tokens from this folder, Hub id or
            model_type instead of `source`; or compose it from parts, `{"vocab": SOURCE,
            "tokens": SOURCE, "template": FILE}` (the vocabulary of one source, the tokenizer
            config, added/special tokens and chat template of another, a template file).
        chat_template: a Jinja file that replaces the tokenizer's chat template.
        add_tokens: tokens added to the tokenizer as whole tokens (not special).
        special_tokens: special-token roles to set, new tokens added (`{"pad_token": "<pad>",
            "additional_special_tokens": [...]}`).
        pooling: add a sentence-transformers front end (modules.json, 1_Pooling/) with this
            pooling mode (mean, cls, max, mean_sqrt_len); a source with its own modules.json
            keeps its pipeline without it (`tinykit.frontend.sentence`).
        **spec: ShrinkSpec fields (hidden, layers, vocab, dtype, seed, mode, ...).

    Raises:
        UsageError: bad source, spec, class, task or output folder. UnsupportedModelError:
        remote code or no model class. HubError: the Hub could not be read.
    """
    started = time.perf_counter()
    if not isinstance(source, (str, os.PathLike)):
        raise UsageError(
            f"source={source!r} is not a folder, model_type or Hub id. Pass one of those as a "
            "str or Path (e.g. make_tiny('qwen3_moe', 'tiny-qwen3-moe'))."
        )
    if pooling is not None and model_class is None and task is None:
        task = "base"  # sentence-transformers loads the Transformer module with AutoModel
    choices = BuildChoices(
        model_class=model_class,
        task=task,
        num_labels=num_labels,
        exact_vocab=exact_vocab,
        preset=preset,
        **tokenizer_choices(tokenizer, chat_template),
        add_tokens=_strings("add_tokens", add_tokens),
        special_tokens=None if special_tokens is None else dict(special_tokens),
        pooling=pooling,
    )
    shrink = _spec(dict(spec), choices)
    if out is not None:  # refuse before the (possibly remote) source is read
        check_target(output_path(out, ""), force)
    stage(f"resolving {source}")
    src = resolve(source, revision, trust_remote_code)
    if shrink.mode == "faithful" and src.folder is None:  # refuse before building anything
        raise UsageError(
            f"--mode faithful keeps the source's real tokenizer, and {src.name!r} (a bare model_type) has "
            f"none. Use a folder or Hub id as the source, or --mode tiny."
        )
    if (choices.model_class or choices.task) and _runs_own_code(src):
        raise UsageError(
            f"--class and --task choose among transformers' own classes, and {src.name} needs "
            "the repository's code (auto_map). Drop them to build its own auto_map class."
        )
    if display_source is not None:
        src = dataclasses.replace(src, name=str(display_source))
    target = output_path(out, f"tiny-{src.short_name}")
    with output_errors(target), replace_folder(target, force=force) as staging, tiny_threads():
        built = _build_into(staging, src, shrink, recipes, trust_remote_code, choices)
        provenance.write(staging, src, shrink, built, recipes)
        if check:  # a model that does not run (or is not tiny) is never written
            _check(staging, src, built.model, trust_remote_code)
    files = provenance.file_table(target)
    pushed = None
    if push_to_hub:
        from tinykit.hub import client as hub

        stage(f"pushing to {push_to_hub}")
        pushed = hub.push_folder(target, push_to_hub)
    return BuildResult(
        path=target,
        model_class=built.model_class,
        params=built.params,
        bytes=sum(f["bytes"] for f in files.values()),
        seconds=time.perf_counter() - started,
        files=files,
        layers=built.layers,
        pushed=pushed,
    )


def _strings(name: str, value: Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        raise UsageError(f'{name}={value!r} must be a list of strings, e.g. {name}=["<think>"].')
    return tuple(value)


def _spec(spec: dict[str, Any], choices: BuildChoices) -> ShrinkSpec:
    """The ShrinkSpec: a preset's sizes under the explicit ones; checks that need no source."""
    from tinykit.model.recipes import preset

    given = {k: v for k, v in spec.items() if v is not None}
    shrink = ShrinkSpec.from_kwargs(
        **{**(preset(choices.preset) if choices.preset else {}), **given}
    )
    if choices.exact_vocab and shrink.mode == "faithful":
        raise UsageError(
            "--exact-vocab pads the tiny tokenizer to --vocab, and --mode faithful keeps the real "
            "tokenizer and its vocab. Drop one of them."
        )
    if choices.chat_template and not Path(choices.chat_template).expanduser().is_file():
        raise UsageError(
            f"--chat-template {choices.chat_template} is not a file. Pass a Jinja template file."
        )
    from tinykit.frontend.sentence import check_pooling

    check_pooling(choices.pooling)
    if choices.task is not None:
        from tinykit.model.classes import check_task

        check_task(choices.task)
    return shrink


def _build_into(
    tmp: Path,
    src: Source,
    spec: ShrinkSpec,
    recipes: tuple[str, ...],
    trust_remote_code: bool,
    choices: BuildChoices | None = None,
) -> Built:
    import torch
    from transformers.utils import logging as hf_logging

    from tinykit.frontend.sentence import write_front_end
    from tinykit.frontend.tokenizer import ship
    from tinykit.model.inputs.processor import add_media_tokens, ship_processor

    choices = choices or BuildChoices()
    hf_logging.disable_progress_bar()  # keep CLI output to tinykit's one line
    remote = src.folder if trust_remote_code and "auto_map" in src.config else None
    requested = None if remote else _requested(src, choices, recipes)  # a typo fails first
    stage(f"tokenizer ({spec.mode} mode)")
    shipped = ship(tmp, src, spec, choices, _takes_text(src), trust_remote_code, recipes)
    shipped = add_media_tokens(tmp, src, spec, choices, shipped)  # the processor's placeholders
    shrunk = _shrunk_config(src, spec, recipes, remote, shipped)
    cls, config = class_and_config(
        src.config, shrunk.config, name=src.name, remote=remote is not None, requested=requested
    )
    if choices.num_labels is not None:
        config.num_labels = choices.num_labels
    _fill_pad_token(cls, config)
    # BART's legacy flag makes transformers warn on every load: the generation config says it.
    force_bos = bool(config.__dict__.pop("force_bos_token_to_be_generated", False))
    dtype = getattr(torch, spec.dtype)
    stage(f"weights: {cls.__name__} ({spec.dtype}, seed {spec.seed})")
    torch.manual_seed(spec.seed)
    if remote is not None:  # where transformers finds the code (else it asks the Hub for '')
        config._name_or_path = str(remote)
    model = (
        cls._from_config(config, dtype=torch.float32)
        if remote is None
        else cls.from_config(config, trust_remote_code=True)
    )
    model = model.to(dtype)
    _attach_generation_config(model, src, spec, shipped)
    _recipe_generation(model, src, recipes)
    if force_bos and model.generation_config.forced_bos_token_id is None:
        model.generation_config.forced_bos_token_id = config.bos_token_id
    # Under torch.distributed, transformers saves on rank 0 only; this folder is this process's
    # own artifact (a tinykit_dist test builds its fixture on whichever rank takes the lock).
    model.should_save_on_this_rank = lambda is_main_process: True
    model.save_pretrained(tmp)
    _write_recipe_files(tmp, src, model.config, spec, recipes)
    stage("processor")
    ship_processor(tmp, src, model, shrunk)
    write_front_end(tmp, src.folder, model.config, pooling=choices.pooling, seed=spec.seed)
    params = sum(p.numel() for p in model.parameters())
    layers = {path: list(plan.kept) for path, plan in shrunk.plans.items()}
    options = {**choices.changed(), **shipped.record}
    return Built(type(model).__name__, params, layers, options, model)


def _shrunk_config(
    src: Source, spec: ShrinkSpec, recipes: tuple[str, ...], remote: Path | None, shipped: Shipped
) -> ShrunkConfig:
    """The tiny config, its vocab fitted to the shipped tokenizer and, for a tokenizer from
    another source, its special-token ids set to that tokenizer's."""
    shrink = functools.partial(shrink_config, src.config, spec, recipes=recipes, remote_code=remote)
    foreign = bool(shipped.special_ids) or shipped.record.get("tokenizer_source") is not None
    tiny = spec.mode == "tiny"
    shrunk = shrink(vocab=shipped.vocab_size if tiny else None, token_ids=shipped.id_map)
    text = shrunk.config.get_text_config(decoder=True)
    if foreign and not tiny and (text.vocab_size or 0) < (shipped.vocab_size or 0):
        shrunk = shrink(vocab=shipped.vocab_size, token_ids=None)  # room for every token
    if foreign:
        for node in {id(c): c for c in (shrunk.config, shrunk.config.get_text_config())}.values():
            for key, value in shipped.special_ids.items():
                if hasattr(node, key) or key in ("bos_token_id", "eos_token_id", "pad_token_id"):
                    setattr(node, key, value)
    return shrunk


def _requested(src: Source, choices: BuildChoices, recipes: tuple[str, ...]) -> Any | None:
    """The class --class/--task name, or a recipe's `[set] architectures`; None: the default."""
    from tinykit.model.classes import requested_class
    from tinykit.model.config import config_class
    from tinykit.model.recipes import recipe_for

    name, task = choices.model_class, choices.task
    if name is None and task is None:
        fixed = recipe_for(src.model_type, recipes).set.get("architectures")
        if fixed is None:
            return None
        if not (isinstance(fixed, list) and len(fixed) == 1 and isinstance(fixed[0], str)):
            raise UsageError(
                f"a recipe for {src.model_type} sets architectures = {fixed!r}; it must be a list "
                'of one class name, e.g. architectures = ["BertModel"].'
            )
        name = fixed[0]
    return requested_class(src.model_type, config_class(src.model_type), name, task)


def _fill_pad_token(cls: Any, config: Any) -> None:
    """A sequence classifier pools at the last non-pad token and refuses batches without a pad
    id: give it the eos id, as a fine-tuning script would."""
    if not cls.__name__.endswith("ForSequenceClassification"):
        return
    if getattr(config, "pad_token_id", None) is None:
        eos = getattr(config, "eos_token_id", None)
        eos = eos[0] if isinstance(eos, list) and eos else eos
        config.pad_token_id = eos if isinstance(eos, int) else 0


def class_and_config(
    raw: dict[str, Any],
    config: Any,
    *,
    name: str = "",
    remote: bool = False,
    requested: Any | None = None,
) -> tuple[Any, Any]:
    """The transformers class a build of config.json dict `raw` instantiates, and the config it
    is built from: `config` (the loaded, maybe shrunk, `raw`), or the part of a composite config
    the class is made for. The class is `requested`, else `raw`'s own architecture, else the
    first task class transformers maps its type to; `remote`: the source's own code builds it.
    `name` names the source in the error when there is no class."""
    cls = _model_class(raw, config, name, remote, requested)
    return cls, config if remote else _config_for(cls, config)


def _model_class(
    raw: dict[str, Any], config: Any, name: str, remote: bool, requested: Any | None
) -> Any:
    import transformers
    from transformers.models.auto import modeling_auto

    if requested is not None:
        return requested
    if remote:
        return (
            transformers.AutoModelForCausalLM
            if "AutoModelForCausalLM" in raw["auto_map"]
            else transformers.AutoModel
        )
    for arch in raw.get("architectures") or []:
        if hasattr(transformers, arch):
            return getattr(transformers, arch)
    # encoder-decoders (BART, Whisper) also map to a decoder-only causal LM: prefer the whole model
    order = (
        TASK_MAPPINGS[1:3] + TASK_MAPPINGS[:1] + TASK_MAPPINGS[3:]
        if config.is_encoder_decoder
        else TASK_MAPPINGS
    )
    for mapping in order:
        class_name = getattr(modeling_auto, mapping).get(config.model_type)
        if class_name and hasattr(transformers, class_name):
            return getattr(transformers, class_name)
    raise UnsupportedModelError(
        f"{name or config.model_type}: no transformers model class for model_type "
        f"{config.model_type!r}. Name one in config.json 'architectures'.",
        model_type=config.model_type,
    )


def _config_for(cls: Any, config: Any) -> Any:
    """A composite config's text/decoder part when the class (a causal LM of a multimodal
    family, say) is made for that part alone; else `config`."""
    wanted = getattr(cls, "config_class", None)
    if wanted is None or isinstance(config, wanted):
        return config
    subs = [getattr(config, name, None) for name in getattr(config, "sub_configs", {})]
    return next((sub for sub in subs if isinstance(sub, wanted)), config)


def _runs_own_code(src: Source) -> bool:
    """Whether the source needs its repository's code: an `auto_map` on a model_type transformers
    lacks. A native type's `auto_map` is stale (the config predates transformers' own class) and
    is dropped, so --class and --task still choose among transformers' classes."""
    from transformers import CONFIG_MAPPING

    return "auto_map" in src.config and src.model_type not in CONFIG_MAPPING


def _takes_text(src: Source) -> bool:
    """Whether the model reads token ids: its config (or a sub-config) has a vocabulary. One
    the class leaves None (ESM's) counts: the shrink rules give it the tiny vocab."""
    from tinykit.model.config import load_config

    config = load_config(src.config) if not _runs_own_code(src) else None
    return config is not None and hasattr(config.get_text_config(decoder=True), "vocab_size")


def _attach_generation_config(model: Any, src: Source, spec: ShrinkSpec, shipped: Shipped) -> None:
    """Carry the source's generation_config.json over, with its token ids kept inside the vocab
    (those of a tokenizer from another source: its own)."""
    path = src.folder / "generation_config.json" if src.folder else None
    if path is None or not path.is_file():
        return
    from transformers import GenerationConfig

    data = json.loads(path.read_text())
    data.pop("transformers_version", None)
    if spec.mode == "tiny" or shipped.special_ids:
        remap_token_ids(data, model.config.get_text_config().vocab_size, shipped.id_map)
    for key, value in shipped.special_ids.items():
        if key in data:
            data[key] = value
    model.generation_config = GenerationConfig.from_dict(data)


def _write_recipe_files(
    tmp: Path, src: Source, config: Any, spec: ShrinkSpec, recipes: tuple[str, ...]
) -> None:
    """The files the class loads beside the weights (recipe `[files]`), where the source has none."""
    from tinykit.model.recipe_files import write_recipe_files
    from tinykit.model.recipes import recipe_for

    files = recipe_for(src.model_type, recipes).files
    if src.folder:  # a real checkpoint's own file is copied with it, not made up
        files = {k: v for k, v in files.items() if not (src.folder / k).is_file()}
    write_recipe_files(tmp, config, files, spec.seed)


def _recipe_generation(model: Any, src: Source, recipes: tuple[str, ...]) -> None:
    """Settings `generate` requires that the generation config lacks or holds otherwise (a bare
    Pop2Piano's has no composer table; CLVP's generate reads dict outputs:
    `return_dict_in_generate`), from the family's recipe ([generation]); those the source's
    generation_config.json names win."""
    from tinykit.model.recipes import recipe_for

    path = src.folder / "generation_config.json" if src.folder else None
    own = json.loads(path.read_text()) if path is not None and path.is_file() else {}
    for key, value in recipe_for(model.config.model_type, recipes).generation.items():
        if own.get(key) is None:
            setattr(model.generation_config, key, value)
            # no longer the model config's copy: transformers drops the settings of one it
            # believes derived when it loads it back
            model.generation_config._from_model_config = False


def _check(tmp: Path, src: Source, model: Any, trust_remote_code: bool) -> None:
    from tinykit.model.verify import verify_built

    report = verify_built(tmp, model, trust_remote_code=trust_remote_code)
    if not report.ok:
        tokenizer = all("tokenizer" in p for p in report.problems)
        fix = (
            "Pass --tokenizer SOURCE (a folder, Hub id or model_type whose tokenizer fits)"
            if tokenizer
            else "Add a recipe (--recipe PATH) for the keys named"
        )
        raise TinyArtifactInvalid(
            f"the tiny {src.model_type} model built from {src.name} fails its check, so nothing "
            f"was written: {'; '.join(report.problems)}. {fix}, or pass --no-check to write it "
            "anyway.",
            report=report.to_dict(),
        )
