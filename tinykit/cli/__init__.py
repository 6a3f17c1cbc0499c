"""The `tinykit` command: a thin adapter that parses, calls one API function, and renders.

Each command lives in its own module of this package (found automatically; `_*.py` are
private) and defines `register(subparsers)`, which adds its parser and sets `func=<run>`. Errors are rendered here, and only here:
a `TinykitError` becomes one line on stderr and its exit code; TINYKIT_DEBUG=1 adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
import traceback

from tinykit import __version__
from tinykit.cli._args import OneLineParser
from tinykit.cli._signals import Terminated, stop_on_sigterm
from tinykit.errors import TinykitError


def command_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (``only``, a command module) just that command's: a usage error
    of one command then answers without importing the other commands' modules."""
    parser = OneLineParser(  # its subparsers are OneLineParsers too
        prog="tinykit",
        description="Tiny random Hub models, tokenizers and datasets for fast, reproducible ML tests.",
    )
    parser.add_argument("--version", action="version", version=f"tinykit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in [only] if only else command_modules():
        importlib.import_module(f"tinykit.cli.{name}").register(sub)
    return parser


def emit(result: object, as_json: bool, text: str) -> None:
    """Print a command's result: JSON for programs, `text` for people."""
    print(json.dumps(result, indent=2, sort_keys=True, default=str) if as_json else text)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse; an unknown flag is reported by its subcommand's parser, with its usage and the
    nearest flag it has (argparse would show the top-level usage)."""
    from tinykit.suggest import hint

    words = sys.argv[1:] if argv is None else argv
    first = next((w for w in words if not w.startswith("-")), "").replace("-", "_")
    only = first if first in command_modules() and "-h" not in words else None
    parser = build_parser(only)
    commands = [m.replace("_", "-") for m in command_modules()]
    if first and not only and first.replace("_", "-") not in commands:
        parser.error(
            f"unknown command {first!r}.{hint(first, commands)} Commands: {', '.join(commands)}."
        )
    args, extra = parser.parse_known_args(words)
    if extra:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        command = sub.choices[args.command]
        flags = [o for a in command._actions for o in a.option_strings if o.startswith("--")]
        unknown = next((e for e in extra if e.startswith("-")), extra[0])
        command.error(
            f"unrecognized arguments: {' '.join(extra)}.{hint(unknown.split('=')[0], flags)}"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from tinykit.progress import to_stderr

    to_stderr()  # stage lines of long commands on stderr; the result stays alone on stdout
    try:
        with stop_on_sigterm():  # SIGTERM cleans up as Ctrl-C does: temp folders, servers
            return int(args.func(args) or 0)
    except TinykitError as e:
        if os.environ.get("TINYKIT_DEBUG"):
            traceback.print_exc()
        print(f"tinykit: error: {type(e).__name__}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        return 143 if isinstance(e, Terminated) else 130  # 128 + the signal number


if __name__ == "__main__":
    sys.exit(main())
