"""verify: load a tiny model folder and prove it works (forward, backward, generate, reload).

The report also names the block types kept (`block_types`), read off the built modules, so a
test can compare them with the source's structure built at full depth on the meta device.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tinykit._progress import stage
from tinykit.errors import TinyArtifactInvalid
from tinykit.model.inputs import BATCH, SEQ, Inputs, make_inputs
from tinykit.model.load import ModelFolder, one_line, open_model_folder


@dataclass
class VerifyReport:
    """What `verify` checked; `ok` is False when any problem was found."""

    path: str
    model_class: str = ""
    params: int = 0
    bytes: int = 0
    weight_bytes: int = 0
    """Bytes of the weight files as written (parameters and persistent buffers), held to the
    size budget of a tiny model (see model/size.py)."""
    loss: float | None = None
    grads: str = ""
    generated: bool | None = None
    reload_equal: bool | None = None
    block_types: dict[str, list[str]] = field(default_factory=dict)
    tokenizer: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def raise_if_failed(self) -> None:
        """Raise TinyArtifactInvalid (one line, every problem) unless the report is ok."""
        if self.problems:
            raise TinyArtifactInvalid(
                f"{self.path} failed verification: {'; '.join(p.rstrip('.') for p in self.problems)}. "
                f"Rebuild it with `tinykit make-tiny`, or fix the file named.",
                report=self.to_dict(),
            )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def verify(
    path: str | Path, *, raise_on_failure: bool = False, trust_remote_code: bool = False
) -> VerifyReport:
    """Load the model in `path`, run forward + backward (finite loss), generate (generative models),
    and reload it to check the logits are identical. Raises TinyArtifactInvalid if asked to.

    A folder with its own model code (``auto_map`` and a model_type transformers lacks) loads
    only with ``trust_remote_code=True``; without it, an UnsupportedModelError says so before
    any of that code runs."""
    folder, report = _open(path, trust_remote_code)
    try:
        model = folder.load()
    except TinyArtifactInvalid as e:
        report.problems.append(getattr(e, "problem", str(e)))
        return _finish(report, raise_on_failure)
    return _finish(_checks(model.eval(), folder, report), raise_on_failure)


def verify_built(path: str | Path, model: Any, *, trust_remote_code: bool = False) -> VerifyReport:
    """`verify` of a folder just saved from `model` (make_tiny's check before the folder is moved
    into place), loading it once rather than twice: the model in memory is run, and the reload
    must give its outputs. Where that finds a problem, the folder is verified as loaded, and
    that report stands: a model cast after its init holds buffers that a load recomputes (a
    bfloat16 build's rotary table, float32 when loaded), so only the files decide."""
    folder, report = _open(path, trust_remote_code)
    if _checks(model.eval(), folder, report).ok:
        return report
    return verify(path, trust_remote_code=trust_remote_code)


def _open(path: str | Path, trust_remote_code: bool) -> tuple[ModelFolder, VerifyReport]:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder = open_model_folder(path, trust_remote_code=trust_remote_code)
    report = VerifyReport(str(folder.path), model_class=folder.class_name)
    report.bytes = sum(p.stat().st_size for p in folder.path.iterdir() if p.is_file())
    stage(f"checks: loading {folder.path} with {report.model_class}")
    return folder, report


def _checks(model: Any, folder: ModelFolder, report: VerifyReport) -> VerifyReport:
    report.params = sum(p.numel() for p in model.parameters())
    report.block_types = block_types(model)
    _size(model, folder.path, report)
    try:
        # floating inputs in the model's dtype: a bfloat16 build's audio features too (Whisper's)
        made = make_inputs(model, labels=True).to(model.device, model.dtype)
    except Exception as e:  # a vision tower that fails on sample pixels is a finding too
        report.problems.append(f"sample inputs cannot be made: {one_line(e)}")
        return report
    inputs = made.forward
    stage("checks: forward + backward, generate, reload, tokenizer")
    _train_step(model, inputs, made.labels, report)
    _generate(model, made, report)
    _reload(model, folder, inputs, report)
    _tokenizer(model, folder, inputs, report)
    return report


def _finish(report: VerifyReport, raise_on_failure: bool) -> VerifyReport:
    if raise_on_failure:
        report.raise_if_failed()
    return report


def _size(model: Any, folder: Path, report: VerifyReport) -> None:
    """Dimensions the build spec does not explain, and weight files over the budget, are problems."""
    from tinykit.model.provenance import read_manifest
    from tinykit.model.size import saved_bytes, size_problems
    from tinykit.model.spec import ShrinkSpec

    manifest = read_manifest(folder) or {}
    report.weight_bytes = saved_bytes(folder)
    if "spec" not in manifest:  # not a make-tiny build (a real-width slice, say): no tiny budget
        return
    spec = ShrinkSpec.from_kwargs(**manifest["spec"])
    report.problems += size_problems(model, folder, spec)


def _train_step(model: Any, inputs: dict, labels: dict, report: VerifyReport) -> None:
    # a train-mode forward moves BatchNorm's running statistics: put them back afterwards, so
    # the model still equals the saved weights for the reload comparison
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    try:
        _train_forward_backward(model, inputs, labels, report)
    finally:
        with _no_grad():
            for name, buffer in model.named_buffers():
                # a table regrown to the input's length (Seamless M4T's sinusoidal positions) is
                # recomputed, not trained: it stays
                if name in buffers and buffer.shape == buffers[name].shape:
                    buffer.copy_(buffers[name])


def _no_grad() -> Any:
    import torch

    return torch.no_grad()


REFUSES_TRAINING = re.compile(
    r"does not support training|training\b.{0,20}\bnot (yet )?(supported|implemented)", re.I
)
"""How transformers words a head's refusal of labels ("PPDocLayoutV4ForObjectDetection does not
support training", "Training is not implemented yet")."""


def _train_forward_backward(model: Any, inputs: dict, labels: dict, report: VerifyReport) -> None:
    model.train()
    out = _train_forward(model, inputs, labels, report)
    if out is None:
        return
    loss = out.loss if getattr(out, "loss", None) is not None else _stand_in(model, inputs, out)
    if loss is None:
        report.problems.append(
            "forward returned no floating-point output (integer codes only) and computes none "
            "with a gradient path: nothing to train"
        )
        return
    loss = loss.mean()  # a per-sample loss (DAC's) is averaged over the batch
    report.loss = float(loss.detach())
    if not math.isfinite(report.loss):
        report.problems.append(f"loss is not finite ({report.loss})")
        return
    loss.backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    with_grad = sum(1 for p in trainable if p.grad is not None)
    report.grads += f"{with_grad}/{len(trainable)} parameter tensors got a gradient"
    if with_grad == 0:
        report.problems.append("backward gave no gradient to any parameter")
    model.zero_grad(set_to_none=True)


REFUSES_TRAINING = re.compile(
    r"does not support training|training\b.{0,20}\bnot (yet )?(supported|implemented)", re.I
)
"""How transformers words a head's refusal of labels ("PPDocLayoutV4ForObjectDetection does not
support training", "Training is not implemented yet")."""


def _train_forward(model: Any, inputs: dict, labels: dict, report: VerifyReport) -> Any:
    """The train-mode output with labels; without them where transformers refuses labels to the
    head (PP-DocLayout's detector), which is then trained on its outputs, as heads that take no
    labels at all (DPT's, SuperPoint's) are. None, with the problem reported, on a failure."""
    try:
        return model(**inputs, **labels)
    except Exception as e:  # any model failure is a verification finding, reported as such
        if not (labels and REFUSES_TRAINING.search(str(e))):
            report.problems.append(f"forward failed: {one_line(e)}")
            return None
        refused = one_line(e)
    try:
        out = model(**inputs)
    except Exception as e:  # reported, not raised
        report.problems.append(f"forward failed: {one_line(e)}")
        return None
    report.grads = f"labels refused ({refused}): trained on its outputs; "
    return out


def _stand_in(model: Any, inputs: dict, out: Any) -> Any:
    """A loss on the outputs: the first differentiable float one; for a forward that returns
    integer codes only (WavTokenizer's encoder), the last float tensor a module computed on the
    way (the embeddings it quantizes). None where neither exists."""
    target = _differentiable(out) if next(_tensors(out), None) is not None else None
    if target is None:
        target = _last_inner_float(model, inputs)
    return None if target is None else _without_masked(target.float()).pow(2).mean()


def _last_inner_float(model: Any, inputs: dict) -> Any:
    """The last float tensor with a gradient path that a module of `model` returned while the
    forward on `inputs` ran; None if none did."""
    found: list[Any] = []

    def keep(_module: Any, _args: Any, output: Any) -> None:
        found.extend(t for t in _tensors(output) if t.requires_grad)

    handles = [m.register_forward_hook(keep) for m in model.modules()]
    try:
        model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    return found[-1] if found else None


def _without_masked(x: Any) -> Any:
    """Logits masked to -inf by design (Grounding DINO's beyond the text's tokens) left out of
    the stand-in loss; NaN and +inf still make it non-finite."""
    return x.masked_fill(x == float("-inf"), 0.0)


def _first_tensor(out: Any) -> Any:
    """The first float output, else the first of any dtype (an encoder's integer codes)."""
    first = next(_tensors(out), None)
    return first if first is not None else next(_tensors(out, floating=False))


def _differentiable(out: Any) -> Any:
    """The first output the weights have a gradient path to (SuperPoint returns its keypoint
    coordinates, which have none, before its scores)."""
    tensors = list(_tensors(out))
    # (and finite: Grounding DINO's logits are -inf at masked text positions)
    finite = [t for t in tensors if t.requires_grad and bool(t.isfinite().all())]
    return next(iter(finite), next((t for t in tensors if t.requires_grad), tensors[0]))


def _seeded(model: Any, inputs: dict) -> Any:
    import torch

    torch.manual_seed(0)
    return model(**inputs)


def _tensors(out: Any, *, floating: bool = True) -> Any:
    """The tensors of a model output in order (floating ones only unless `floating` is False),
    nested tuples and outputs included (MGP-STR returns its logits as a tuple of three heads)."""
    import torch
    from transformers.cache_utils import Cache

    if isinstance(out, torch.Tensor):
        if out.is_floating_point() or not floating:
            yield out
        return
    if isinstance(out, Cache):  # the KV cache a forward returns is no output to train
        return
    values = out.values() if hasattr(out, "values") else out
    if isinstance(values, str) or not hasattr(values, "__iter__"):
        return
    for value in values:
        yield from _tensors(value, floating=floating)


def _generate(model: Any, made: Inputs, report: VerifyReport) -> None:
    # Text generation only: speech models (Whisper) need a real tokenizer's timestamp layout.
    if not model.can_generate() or model.main_input_name != "input_ids":
        return
    model.eval()
    try:
        import torch

        # half the sequence as the prompt: prompt + new tokens stay within the trained length
        prompt = {  # image tokens stay in front of the prompt
            k: v[:, : v.shape[1] - SEQ // 2] if k in made.along_text else v
            for k, v in made.forward.items()
            if not k.startswith("decoder_")
        }
        with torch.no_grad():
            # num_return_sequences: MusicGen's own generate reads it before transformers fills
            # in its default (1)
            model.generate(**prompt, max_new_tokens=2, do_sample=False, num_return_sequences=1)
        report.generated = True
    except Exception as e:  # reported, not raised: verify lists every failure at once
        report.generated = False
        report.problems.append(f"generate failed: {one_line(e)}")


def _reload(model: Any, folder: ModelFolder, inputs: dict, report: VerifyReport) -> None:
    import torch

    model.eval()
    try:
        # the config open_model_folder read from this folder: not read and built a second time
        again = folder.load(config=folder.config).eval()
        with torch.no_grad():  # the same seed for both: ViT-MAE masks patches at random
            a = _first_tensor(_seeded(model, inputs))
            b = _first_tensor(_seeded(again, inputs))
        report.reload_equal = bool(torch.equal(a, b))
        # (inf equals itself: Grounding DINO's logits are -inf at masked positions by design)
        has_nan = a.is_floating_point() and bool(a.isnan().any())
    except TinyArtifactInvalid as e:  # weights that do not load back
        report.problems.append(getattr(e, "problem", str(e)))
        return
    except Exception as e:  # reported, not raised
        report.problems.append(f"reload and forward failed: {one_line(e)}")
        return
    if has_nan:  # NaN never equals itself: the reload cannot be compared (ALIGN's underflow)
        report.problems.append("eval-mode outputs hold NaN: the reload cannot be compared")
    elif not report.reload_equal:
        report.problems.append("logits after reload differ from the saved model's")


def _tokenizer(model: Any, model_folder: ModelFolder, inputs: dict, report: VerifyReport) -> None:
    """Check the tokenizer shipped beside the model, then run the model on its encoding of the probe."""
    import torch
    from transformers import AutoTokenizer

    from tinykit.tokenizer.check import PROBE, check_tokenizer, encode
    from tinykit.tokenizer.source import has_tokenizer_files

    folder, trust = model_folder.path, bool(model_folder.own_code)
    if not has_tokenizer_files(folder):
        vocab = getattr(model.config.get_text_config(decoder=True), "vocab_size", None)
        # BEiT's vocabulary is of visual tokens: only a model that reads token ids needs text
        if (
            vocab is not None and "input_ids" in inputs
        ):  # it reads token ids, and a test has nothing to encode text with
            report.problems.append(
                f"no tokenizer beside the model, which reads token ids (vocab_size {vocab}): the "
                "folder has no tokenizer.json, vocab files or tokenizer model. Copy the source's "
                "tokenizer files into it, or build it with make-tiny --tokenizer SOURCE"
            )
        return
    tok = AutoTokenizer.from_pretrained(folder, config=model_folder.config, trust_remote_code=trust)
    report.tokenizer = check_tokenizer(folder, trust_remote_code=trust, loaded=tok)
    report.problems += [f"tokenizer: {p}" for p in report.tokenizer.get("problems", [])]
    if "input_ids" not in inputs:
        return
    ids = encode(tok, PROBE, return_tensors="pt")["input_ids"]
    ids = ids[
        :, : getattr(model.config.get_text_config(decoder=True), "max_position_embeddings", None)
    ]
    try:
        with torch.no_grad():
            probe = make_inputs(model, text=ids.repeat(BATCH, 1)).forward
            logits = _first_tensor(model(**probe))
        report.tokenizer["forward"] = {
            "tokens": ids.shape[1],
            "finite": bool(torch.isfinite(logits).all()),
        }
    except Exception as e:  # reported, not raised
        report.problems.append(
            f"forward pass on the tokenizer's encoding of the probe failed: {one_line(e)}"
        )


def block_types(model: Any) -> dict[str, list[str]]:
    """The distinct layer kinds of every layer stack: class, child classes and attention type."""
    import torch

    stacks: dict[str, list[str]] = {}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.ModuleList) or not len(module):
            continue
        layers = [layer for layer in module if layer is not None]  # Informer's empty slots
        if not layers or not all(len(list(layer.children())) > 1 for layer in layers):
            continue  # a list of plain tensors-holders (experts, norms), not a layer stack
        stack = re.sub(r"\.\d+(?=\.|$)", ".*", name)  # T5's per-block lists form one stack
        stacks[stack] = sorted(
            set(stacks.get(stack, [])) | {_layer_kind(layer) for layer in layers}
        )
    return stacks


def _layer_kind(layer: Any) -> str:
    children = ",".join(f"{n}:{type(c).__name__}" for n, c in layer.named_children())
    attention = next(
        (
            getattr(m, a)
            for m in (layer, *layer.children())
            for a in ("layer_type", "attention_type")
            if isinstance(getattr(m, a, None), str)
        ),
        None,
    )
    if attention is None and any(
        getattr(m, "is_sliding", False) is True for m in (layer, *layer.children())
    ):
        attention = "sliding"
    return f"{type(layer).__name__}({children})" + (f"[{attention}]" if attention else "")
