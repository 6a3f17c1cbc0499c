"""Keep secrets out of environment bundles: which variables to keep, which values to hide.

A value is hidden when its variable is named like a secret (a `_`-separated part such as TOKEN,
KEY, SECRET, PASSWORD, or a part ending in one: HF_TOKEN, AWS_SECRET_ACCESS_KEY, WANDB_API_KEY).
Every kept value is also scrubbed: the password of a URL (scheme://user:password@host) and
token-shaped strings (hf_…, AKIA…, ghp_…, sk-…) are replaced, whatever the variable is called.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["REDACTED", "is_relevant_env", "is_secret_name", "redact_env", "scrub"]

REDACTED = "<redacted>"

_SECRET_PARTS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "KEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "SIGNATURE",
    "PASS",
    "PAT",
    "APIKEY",
)
# Variables that change how ML code runs; the rest of the environment is noise by default.
_RELEVANT_PREFIXES = (
    "CUDA",
    "NCCL",
    "TORCH",
    "PYTORCH",
    "CUBLAS",
    "CUDNN",
    "NVIDIA",
    "HF_",
    "HUGGINGFACE",
    "TRANSFORMERS",
    "TOKENIZERS",
    "DATASETS",
    "ACCELERATE",
    "DEEPSPEED",
    "OMP_",
    "MKL",
    "KMP_",
    "GOMP",
    "OPENBLAS",
    "LD_",
    "PYTHON",
    "TINYKIT",
    "XLA",
    "TF_",
    "HIP",
    "ROCM",
    "HSA_",
    "WANDB",
    "VIRTUAL_ENV",
    "CONDA",
    "PIP_",
    "UV_",
    "MASTER_",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "SLURM_JOB",
    "TRITON",
    "VLLM",
)
_RELEVANT_NAMES = {
    "PATH",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "CC",
    "CXX",
    "MALLOC_CONF",
    "TZ",
    "LANG",
    "LC_ALL",
}

_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):[^@\s/]*@")
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|api_org_[A-Za-z0-9]{20,}|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,})"
)
_AUTH_HEADER = re.compile(r"(?i)\b(bearer|token|basic)\s+[A-Za-z0-9._~+/=-]{16,}")


def is_secret_name(name: str) -> bool:
    parts = [p for p in re.split(r"[^A-Za-z0-9]+", name.upper()) if p]
    return any(
        p in _SECRET_PARTS or p.endswith(("TOKEN", "SECRET", "PASSWORD", "APIKEY")) for p in parts
    )


def is_relevant_env(name: str) -> bool:
    return name in _RELEVANT_NAMES or name.upper().startswith(_RELEVANT_PREFIXES)


def scrub(text: str) -> str:
    """`text` with URL passwords, token-shaped strings and auth headers replaced."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}:{REDACTED}@", text)
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    return _AUTH_HEADER.sub(lambda m: f"{m[1]} {REDACTED}", text)


def redact_env(environ: Mapping[str, str], all_env: bool = False) -> dict[str, str]:
    """The variables to record (relevant ones, or all), secret values replaced by REDACTED."""
    return {
        name: REDACTED if is_secret_name(name) else scrub(value)
        for name, value in sorted(environ.items())
        if all_env or is_relevant_env(name)
    }
