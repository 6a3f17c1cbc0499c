"""The one home of the hub folder layout: where a repo's files lie in a tree `hub serve` serves.

    <root>/<org>/<name>/...                                  a model repo at main
    <root>/datasets/<org>/<name>/...                         a dataset repo at main
    <root>/spaces/<org>/<name>/...                           a Space at main
    <root>/_revisions/<type>/<org>/<name>/<branch>/...       any other branch (refs/pr/1 ...)

The server's store reads this layout, `build_standins` writes it, and the Hub's URLs use the
same prefixes (`/datasets/org/name/resolve/...`). Also here: which file names are model
weights, for the client that never downloads them, the request log that reports them and
make-tiny, which never copies them as tokenizer files.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

# repo type -> the path prefix of its repos, in the served tree and in Hub URLs
URL_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
REVISIONS_DIR = "_revisions"  # <root>/_revisions/<type>/<org>/<name>/<branch>/: other branches
# Top-level folder names that are not an org: a model "datasets/x" would land in the datasets tree
RESERVED_ORGS = frozenset({*(p.rstrip("/") for p in URL_PREFIX.values() if p), REVISIONS_DIR})

# File names that are model weights (or other big binary checkpoints), whatever the repo:
# safetensors, PyTorch, TensorFlow/Keras, Flax, GGUF, ONNX, TFLite, rust-bert, NumPy, pickles.
WEIGHT_SUFFIXES = frozenset(
    {
        ".bin",
        ".ckpt",
        ".gguf",
        ".h5",
        ".msgpack",
        ".npz",
        ".onnx",
        ".ot",
        ".pb",
        ".pkl",
        ".pt",
        ".pth",
        ".safetensors",
        ".tflite",
    }
)
# A sharded checkpoint's index (model.safetensors.index.json): it names weight files only.
SHARD_INDEX_SUFFIX = ".index.json"


def is_weight_file(filename: str) -> bool:
    """Whether a file name (a path inside a repo) is a weight file, by its suffix."""
    return PurePosixPath(filename).suffix.lower() in WEIGHT_SUFFIXES


def repo_folder(
    root: str | os.PathLike[str], repo_type: str, repo_id: str, revision: str | None = None
) -> Path:
    """The folder of `repo_id` at `revision` (None or "main": the repo's own folder) in a tree
    rooted at `root`; `repo_type` is "model", "dataset" or "space"."""
    if revision in (None, "main"):
        return Path(root) / URL_PREFIX[repo_type] / repo_id
    return branches_folder(root, repo_type, repo_id) / revision


def branches_folder(root: str | os.PathLike[str], repo_type: str, repo_id: str) -> Path:
    """Where the branches of `repo_id` other than main lie, one folder per branch name."""
    return Path(root) / REVISIONS_DIR / repo_type / repo_id


def stray_files(root: str | os.PathLike[str]) -> list[str]:
    """Files under `root` that lie in no repo folder of this layout (a tree `standins build`
    wrote holds none): `--force` does not replace a folder holding such files."""
    root = Path(root)
    stray = []
    for path in sorted(root.rglob("*")):
        if path.is_dir() and not path.is_symlink():
            continue
        parts = path.relative_to(root).parts
        # <org>/<name>/file; datasets/<org>/<name>/file; _revisions/<type>/<org>/<name>/<branch>/file
        depth = {REVISIONS_DIR: 6}.get(parts[0], 4 if parts[0] in RESERVED_ORGS else 3)
        if len(parts) < depth:
            stray.append("/".join(parts))
    return stray
