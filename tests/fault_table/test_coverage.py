"""The table covers the CLI: every command and every option of `tinykit --help` has a row, no row
expects exit 70, and every option that bounds waiting on user code says its default."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from fault_table.table import EXIT_BUG
from fault_table.test_rows import ROWS
from tinykit.cli import build_parser


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command path, its parser) for the top level and every command and action under it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)
    ]


def covered(
    argv: tuple[str, ...], paths: dict[tuple[str, ...], argparse.ArgumentParser]
) -> tuple[tuple[str, ...], set[str]]:
    """The command path a row's argv runs, and every option string it passes (before `--`)."""
    path: tuple[str, ...] = ()
    used: set[str] = set()
    for word in argv:
        if word == "--":
            break
        if word.startswith("-"):
            used.add(word.split("=", 1)[0])
        elif (*path, word) in paths and not used - {"--debug", "--version"}:
            path = (*path, word)
    return path, used


def test_every_command_and_option_has_a_row():
    paths = dict(commands(build_parser()))
    seen: dict[tuple[str, ...], set[str]] = {}
    for r in ROWS.values():
        path, used = covered(r.argv, paths)
        seen.setdefault(path, set()).update(used)
        if "--debug" in used or "--version" in used:
            seen.setdefault((), set()).update(used & {"--debug", "--version"})
    missing = []
    for path, parser in paths.items():
        name = " ".join(path) or "tinykit"
        if path not in seen:
            missing.append(f"{name}: no row")
            continue
        for action in options(parser):
            if not set(action.option_strings) & seen[path]:
                missing.append(f"{name} {action.option_strings[-1]}: no row")
    assert not missing, "\n".join(missing)


def test_no_row_expects_a_tinykit_bug():
    assert [k for k, r in ROWS.items() if r.code == EXIT_BUG] == []


def test_every_timeout_has_a_default_bound_in_help():
    unbounded = [
        " ".join(path)
        for path, parser in commands(build_parser())
        for action in options(parser)
        if "--timeout" in action.option_strings
        and (action.default is None or "default" not in (action.help or ""))
    ]
    assert unbounded == []
