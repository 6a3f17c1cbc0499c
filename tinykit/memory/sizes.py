"""Byte sizes as people write them ("200 MB", "1.5GiB", 4096) and as reports print them."""

from __future__ import annotations

import re

from tinykit.errors import UsageError

# SI units are powers of 1000 and IEC units powers of 1024, as `ls --si` and `ls -h` disagree.
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(value: str | int | float, what: str = "size") -> int:
    """Bytes of "200 MB", "1.5 GiB", "512kb" or a plain number of bytes."""
    if isinstance(value, bool):
        raise UsageError(f"{what} {value!r} is not a size. Write e.g. '200 MB' or '1 GiB'.")
    if isinstance(value, int | float):
        if value < 0:
            raise UsageError(f"{what} {value!r} is negative. Give a size of 0 bytes or more.")
        return int(value)
    match = _SIZE.match(str(value))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise UsageError(
            f"{what} {value!r} is not a size. Write a number and a unit: B, KB, MB, GB "
            "(powers of 1000) or KiB, MiB, GiB (powers of 1024), e.g. '200 MB'."
        )
    return int(float(match.group(1)) * _UNITS[unit])


def format_bytes(n: float | None) -> str:
    """ "104.9 MB", "1.25 GB": SI units, as budgets are most often written."""
    if n is None:
        return "n/a"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= scale:
            return f"{sign}{n / scale:.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{sign}{int(n)} B"
