"""Files beside the weights that a class's `from_pretrained` loads, written at the tiny geometry
from the family recipe's `[files]` table.

Qwen2.5-Omni's `from_pretrained` loads its talker's speakers from `spk_dict.pt` (a torch-saved
dict: speaker -> conditioning vector, reference mel, first talker token) and refuses a folder
without it. A recipe names each entry as `[inputs.tensors]` names a tensor, its shape in config
keys, or a plain value as a config key:

    [files."spk_dict.pt".Chelsie]
    cond = { shape = [1, "token2wav_config.dit_config.enc_emb_dim"] }
    bos_token = "talker_config.tts_codec_start_token_id"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinykit.model.inputs.declared import declared_size, declared_tensor

TORCH_SUFFIXES = (".pt", ".pth", ".bin")
"""File suffixes written with torch.save (the only kind a `[files]` table writes now)."""


def write_recipe_files(folder: Path, config: Any, files: dict[str, Any], seed: int) -> list[str]:
    """Write each `[files]` entry into `folder`; the names written."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    written = []
    for name, content in files.items():
        if not name.endswith(TORCH_SUFFIXES):
            raise ValueError(f"recipe [files] {name!r}: only torch files {TORCH_SUFFIXES} are made")
        torch.save(_value(config, content, generator), folder / name)
        written.append(name)
    return written


def _value(config: Any, entry: Any, generator: Any) -> Any:
    """A tensor entry (a table with a `shape`), a nested table, or a config key's value."""
    if isinstance(entry, dict) and "shape" in entry:
        return declared_tensor(config, entry, generator, 1, 1)
    if isinstance(entry, dict):
        return {k: _value(config, v, generator) for k, v in entry.items()}
    return declared_size(config, entry, 1, 1)
