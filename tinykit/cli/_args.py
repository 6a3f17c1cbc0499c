"""Argument types with bounds: a count or a duration out of range is a usage error (exit 2)
with the range in the message, not a silent nonsense run."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn


class OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line, like every other tinykit error (the usage is in --help)."""

    def error(self, message: str) -> NoReturn:
        end = "" if message.endswith((".", "?", "!")) else "."
        self.exit(2, f"{self.prog}: error: {message}{end} See: {self.prog} --help\n")


def count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range: use {low} to {high}")
        return value

    parse.__name__ = "count"
    return parse


def regex(text: str) -> str:
    import re

    try:
        re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a regular expression: {e}") from None
    return text


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and 0 < value <= 86400):
        raise argparse.ArgumentTypeError(f"{text} s is out of range: use 0 < seconds <= 86400")
    return value


# How long a user's command may run when no --timeout is given: a hung test or script must not
# hold a terminal, a CI job or a bisect forever. Printed in each command's --help.
COMMAND_TIMEOUT = 3600.0
FUNCTION_TIMEOUT = 600.0  # one run of a function (check-determinism)


def timeout_option(
    p: argparse.ArgumentParser, what: str, default: float = COMMAND_TIMEOUT, stop: str = "SIGTERM"
) -> None:
    """--timeout S with a default bound, the same words everywhere."""
    p.add_argument(
        "--timeout",
        type=seconds,
        default=default,
        metavar="S",
        help=f"stop {what} after S seconds: its whole process group gets {stop}, then SIGKILL "
        f"(default {default:g}; at most 86400)",
    )


def split_command(args: argparse.Namespace) -> list[str]:
    """Split what follows PACKAGE at the first `--`: options before it, the command after.

    argparse alone cannot: a REMAINDER positional after PACKAGE swallows the options too.
    """
    rest = list(args.cmd)
    if "--" not in rest and rest and not rest[0].startswith("-"):
        return rest  # `PACKAGE -- CMD`: argparse took the `--` that followed the positional
    cut = rest.index("--") if "--" in rest else len(rest)
    if rest[:cut]:
        args.options_parser.parse_args(rest[:cut], namespace=args)
    return rest[cut + 1 :]


def comma_list(value: str | None) -> list[str] | None:
    """`--versions a,b,c` as a list (blanks dropped); None when the option was not given."""
    return [x.strip() for x in value.split(",") if x.strip()] if value else None
