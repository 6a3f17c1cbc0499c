"""Real, varied source datasets for the dataset tests, built into a folder on demand.

Real data that installs offline: scikit-learn's bundled iris/wine (ClassLabel tables) and
8x8 digit scans (upscaled to real images), and the docstrings of the standard library (text
from one word to several kB, some empty). Audio is generated (tones of 0.25-3 s).
"""

from __future__ import annotations

import inspect
import io
import json
import math
from pathlib import Path

import numpy as np

# stdlib modules whose docstrings make the text corpora: many short, a few very long, some empty
_DOC_MODULES = (
    "json",
    "os.path",
    "textwrap",
    "shutil",
    "string",
    "random",
    "statistics",
    "fractions",
)


def stdlib_docs(limit: int = 400) -> list[dict]:
    import importlib

    rows = []
    for name in _DOC_MODULES:
        module = importlib.import_module(name)
        for attr in sorted(dir(module)):
            obj = getattr(module, attr)
            if callable(obj) and not attr.startswith("__"):
                rows.append({"name": f"{name}.{attr}", "text": inspect.getdoc(obj) or ""})
    return rows[:limit]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def text_jsonl(root: Path) -> Path:
    """Docstrings: one record per stdlib callable; a missing value and an empty one included."""
    rows = stdlib_docs()
    rows[3]["text"] = None
    return write_jsonl(root / "docs.jsonl", rows)


def chat_jsonl(root: Path) -> Path:
    """Conversations ({role, content} lists) of 1-3 turns, asking about stdlib functions."""
    rows = []
    for i, doc in enumerate(stdlib_docs(120)):
        messages = [{"role": "system", "content": "Answer from the docs."}] if i % 3 == 0 else []
        messages.append({"role": "user", "content": f"What does {doc['name']} do?"})
        messages.append({"role": "assistant", "content": doc["text"] or "No docs."})
        rows.append({"messages": messages, "source": doc["name"]})
    return write_jsonl(root / "chat" / "train.jsonl", rows)


def table_dataset(name: str):
    """A scikit-learn table as a datasets.Dataset with a ClassLabel target."""
    from datasets import ClassLabel, Dataset, Features, List, Value
    from sklearn import datasets as skl

    bunch = {"iris": skl.load_iris, "wine": skl.load_wine}[name]()
    features = Features(
        {
            "measurements": List(Value("float32")),
            "label": ClassLabel(names=[str(n) for n in bunch.target_names]),
        }
    )
    rows = [
        {"measurements": x.tolist(), "label": int(y)}
        for x, y in zip(bunch.data, bunch.target, strict=True)
    ]
    return Dataset.from_list(rows, features=features)


def multi_config_repo(root: Path) -> Path:
    """A folder declaring two configs (iris, wine) with train/test parquet files in its card."""
    repo = root / "tables"
    for name in ("iris", "wine"):
        ds = table_dataset(name).train_test_split(test_size=0.3, seed=0)
        for split in ("train", "test"):
            ds[split].to_parquet(str(repo / name / f"{split}-00000-of-00001.parquet"))
    (repo / "README.md").write_text(
        "---\nlicense: bsd-3-clause\nconfigs:\n"
        "- config_name: iris\n  data_files:\n  - split: train\n    path: iris/train-*.parquet\n"
        "  - split: test\n    path: iris/test-*.parquet\n"
        "- config_name: wine\n  data_files:\n  - split: train\n    path: wine/train-*.parquet\n"
        "  - split: test\n    path: wine/test-*.parquet\n---\n# tables\n"
    )
    return repo


def _digit_images():
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    for i, (pixels, label) in enumerate(zip(digits.images, digits.target, strict=True)):
        gray = Image.fromarray((pixels * 255 / 16).astype(np.uint8), mode="L")
        # vary size, aspect ratio and mode, as real image sets do
        width, height = [(64, 64), (96, 40), (20, 50), (300, 120)][i % 4]
        img = gray.resize((width, height))
        mode = ["L", "RGB", "RGBA", "P"][i % 4]
        yield i, int(label), img.convert(mode) if mode != "P" else img.convert("RGB").quantize(8)


def imagefolder(root: Path, n: int = 40) -> Path:
    """Digit scans as an imagefolder (label from the directory), with captions in metadata."""
    folder = root / "digits"
    meta = []
    for i, label, img in _digit_images():
        if i >= n:
            break
        rel = f"train/{label}/digit_{i:03d}.png"
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        img.save(folder / rel)
        meta.append(
            {"file_name": f"{label}/digit_{i:03d}.png", "caption": f"a handwritten {label}"}
        )
    write_jsonl(folder / "train" / "metadata.jsonl", meta)
    return folder


def image_text_parquet(root: Path, n: int = 30) -> Path:
    """Image+text rows where some rows have no image and some no text (a parquet file)."""
    from datasets import Dataset, Features, Image, Value

    rows = []
    for i, label, img in _digit_images():
        if i >= n:
            break
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        rows.append(
            {
                "image": None if i % 5 == 2 else {"bytes": buf.getvalue(), "path": f"d{i}.png"},
                "text": "" if i % 7 == 3 else f"digit {label}, " * (i % 6 + 1),
            }
        )
    features = Features({"image": Image(), "text": Value("string")})
    path = root / "image_text" / "train.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_list(rows, features=features).to_parquet(str(path))
    return path


def audiofolder(root: Path) -> Path:
    """Tones of 0.25 to 3 s, mono and stereo, WAV and FLAC, 8 and 16 kHz, with transcripts."""
    import soundfile as sf

    folder = root / "tones"
    meta = []
    specs = [
        (0.25, 8000, 1, "wav"),
        (3.0, 16000, 1, "wav"),
        (1.5, 8000, 2, "flac"),
        (2.0, 16000, 1, "flac"),
    ]
    for i in range(8):
        seconds, rate, channels, fmt = specs[i % 4]
        t = np.arange(int(seconds * rate)) / rate
        tone = 0.3 * np.sin(2 * math.pi * (220 + 40 * i) * t)
        data = np.stack([tone] * channels, axis=1) if channels > 1 else tone
        name = f"tone_{i}.{fmt}"
        (folder / "train").mkdir(parents=True, exist_ok=True)
        sf.write(folder / "train" / name, data, rate, subtype="PCM_16")
        meta.append({"file_name": name, "transcript": f"tone {i} at {220 + 40 * i} hertz"})
    write_jsonl(folder / "train" / "metadata.jsonl", meta)
    return folder
