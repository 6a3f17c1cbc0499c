"""Tiny pure-Python wheels written by hand: the local package the bisect tests and benchmark use.

A wheel is a zip with the module files, METADATA, WHEEL and a RECORD of sha256 hashes; writing it
directly takes milliseconds, where `pip wheel` needs a build backend per version.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["NUMERICS_CHECK", "numerics_wheels", "regression_wheels", "write_wheel"]


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(
    folder: str | os.PathLike[str],
    name: str,
    version: str,
    files: Mapping[str, str],
    requires: tuple[str, ...] = (),
) -> Path:
    """Write `name-version-py3-none-any.whl` holding `files` (path -> text) into `folder`."""
    dist = f"{name.replace('-', '_')}-{version}"
    meta = "\n".join(
        ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        + [f"Requires-Dist: {r}" for r in requires]
    )
    wheel = "Wheel-Version: 1.0\nGenerator: tinykit\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries = {**{k: v.encode() for k, v in files.items()}}
    entries[f"{dist}.dist-info/METADATA"] = (meta + "\n").encode()
    entries[f"{dist}.dist-info/WHEEL"] = wheel.encode()
    record = [_record_line(k, v) for k, v in entries.items()] + [f"{dist}.dist-info/RECORD,,"]
    entries[f"{dist}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    out = Path(folder) / f"{dist}-py3-none-any.whl"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w") as z:
        for k, v in entries.items():
            z.writestr(k, v)
    tmp.rename(out)
    return out


# check() returns the exit code a bisect step sees. The flaky release fails every other call,
# counted in a file, so "flaky" is detected deterministically with --repeat 2 or more.
_SOURCE = """VERSION = "{version}"


def check():
    if {flaky}:
        import os
        path = os.environ["TKDEMO_COUNTER"]
        n = int(open(path).read() or 0) if os.path.exists(path) else 0
        open(path, "w").write(str(n + 1))
        return n % 2
    return {bad}
"""


def regression_wheels(
    folder: str | os.PathLike[str],
    versions: list[str],
    *,
    first_bad: str,
    flaky: tuple[str, ...] = (),
    name: str = "tkdemo",
) -> list[Path]:
    """Wheels of `name` at each version; `check()` returns 1 from `first_bad` on, 0 before."""
    from packaging.version import Version

    out = []
    for v in versions:
        src = _SOURCE.format(version=v, flaky=v in flaky, bad=int(Version(v) >= Version(first_bad)))
        out.append(write_wheel(folder, name, v, {f"{name}/__init__.py": src}))
    return out


# A tiny torch model package: `Net` = Linear -> Block(up, act, down) -> Linear. From `changed_in`
# on, the activation module's forward computes differently (a tanh-approximated GELU instead of
# the exact one), the only numerical change between releases.
_NUMERICS_SOURCE = """VERSION = "{version}"

import torch
from torch import nn


class Gelu(nn.Module):
    def forward(self, x):
        return nn.functional.gelu(x, approximate="{approximate}")


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.act = Gelu()
        self.down = nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.down(self.act(self.up(x)))


class Net(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.embed = nn.Linear(4, width)
        self.block = Block(width)
        self.head = nn.Linear(width, 1)

    def forward(self, x, target=None):
        out = self.head(self.block(self.embed(x)))
        return {{"out": out, "loss": nn.functional.mse_loss(out, target)}}
"""

# The predicate a user would write: two SGD steps of the seeded Net on fixed data; the loss must
# match the one written to GOLDEN by the first (good) run, within float32 rounding.
NUMERICS_CHECK = """import os, sys, torch, tknum
torch.manual_seed(0)
torch.set_num_threads(1)
net = tknum.Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.linspace(-3, 3, 32).reshape(8, 4)
target = x.sum(1, keepdim=True)
for _ in range(2):
    loss = net(x, target)["loss"]
    loss.backward()
    opt.step()
    opt.zero_grad()
golden = sys.argv[1]
if not os.path.exists(golden):
    open(golden, "w").write(repr(loss.item()))
sys.exit(int(abs(loss.item() - float(open(golden).read())) > 1e-6))
"""


def numerics_wheels(
    folder: str | os.PathLike[str], versions: list[str], *, changed_in: str, name: str = "tknum"
) -> list[Path]:
    """Wheels of `name` (see `_NUMERICS_SOURCE`); its `Block.act` changes numerics in `changed_in`."""
    from packaging.version import Version

    out = []
    for v in versions:
        approximate = "tanh" if Version(v) >= Version(changed_in) else "none"
        src = _NUMERICS_SOURCE.format(version=v, approximate=approximate)
        out.append(write_wheel(folder, name, v, {f"{name}/__init__.py": src}))
    return out
