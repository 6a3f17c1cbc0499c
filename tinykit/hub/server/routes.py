"""The loopback Hub's URL templates, matched segment by segment (each segment percent-decoded
on its own, so an encoded `/` stays inside its segment and is refused as part of a repo id).

A template is `/`-separated parts:
  `resolve`      a literal segment
  `{org}`        one segment, captured (`{name}.git`: one ending in `.git`, captured without it)
  `{types}`      `models`, `datasets` or `spaces`: the repo type
  `{type?}`      an optional `datasets` or `spaces` segment: the repo type, else a model
  `{file+}`      the rest of the path, one segment or more, joined by `/` (`{path*}`: or none)
A path whose first segment is the literal first part of some template (`api`, `_cdn`, `_lfs`)
only matches those templates: it is never a repo path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from tinykit.hub.server import guard

_PLURAL = {"models": "model", "datasets": "dataset", "spaces": "space"}
_PREFIX = {"datasets": "dataset", "spaces": "space"}


@dataclass
class Target:
    """What a request's URL names, as its route's template reads it (the request log too)."""

    kind: str = "other"  # the route's name in the request log
    repo_type: str = ""
    repo_id: str = ""  # checked: no `..`, `/`, ... parts
    revision: str = ""  # "" where the URL names none: the handlers read it as "main"
    filename: str = ""  # the file a resolve or CDN URL names
    path: str = ""  # the folder a tree listing starts at
    oid: str = ""  # LFS object id, for /_lfs/ upload and verify


@dataclass(frozen=True)
class Route:
    """One row of the route table: a request with one of `methods` whose path fits `template`
    is answered by `handler(request_handler, target)`; `writes` ones need the write token."""

    methods: str  # space-separated, e.g. "GET HEAD"
    template: str
    handler: Callable[[Any, Target], None]
    kind: str  # the request log's name for it: "resolve", "cdn", "api" or "lfs"
    writes: bool = False
    parts: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", tuple(self.template.split("/")))

    @property
    def namespace(self) -> str | None:
        """The literal first segment the template owns (`api`), if it starts with one."""
        return None if self.parts[0].startswith("{") else self.parts[0]

    def match(self, segments: Sequence[str]) -> dict[str, str] | None:
        """The captured values where the decoded path `segments` fit the template, else None."""
        got: dict[str, str] = {}
        i = 0
        for part in self.parts:
            after = _consume(part, segments, i, got)
            if after is None:
                return None
            i = after
        return got if i == len(segments) else None

    def target(self, got: dict[str, str]) -> Target:
        """The request's target; its repo id checked (a 400 `Refused` for `..`, `/`, ...)."""
        return Target(
            kind=self.kind,
            repo_type=got.get("type", ""),
            repo_id=guard.check_repo_id(got["org"], got["name"]) if "org" in got else "",
            revision=got.get("rev", ""),
            filename=got.get("file", ""),
            path=got.get("path", ""),
            oid=got.get("oid", ""),
        )


def _consume(part: str, segments: Sequence[str], i: int, got: dict[str, str]) -> int | None:
    """Match one template part at `segments[i]`, capturing into `got`: the index of the next
    segment, or None where the part does not fit."""
    if part == "{type?}":  # an optional repo type prefix (none: a model)
        prefix = _PREFIX.get(segments[i]) if i < len(segments) else None
        got["type"] = prefix or "model"
        return i + 1 if prefix else i
    if part.endswith(("*}", "+}")):  # the rest of the path (`+`: at least one segment)
        if part.endswith("+}") and i == len(segments):
            return None
        got[part[1:-2]] = "/".join(segments[i:])
        return len(segments)
    if i == len(segments) or not _fits(part, segments[i], got):
        return None
    return i + 1


def _fits(part: str, segment: str, got: dict[str, str]) -> bool:
    """Whether one segment fits one template part, capturing it into `got`."""
    if part == "{types}":
        got["type"] = _PLURAL.get(segment, "")
        return bool(got["type"])
    if not part.startswith("{"):
        return part == segment
    name, _, suffix = part[1:].partition("}")
    got[name] = segment.removesuffix(suffix)
    return segment.endswith(suffix)


def find_route(
    routes: Sequence[Route], method: str, path: str
) -> tuple[Route, dict[str, str]] | None:
    """The first route that answers `method` on the raw URL `path`, with its captured values."""
    segments = [unquote(s) for s in path.split("/")[1:]]
    owner = segments[0] if segments and segments[0] in _namespaces(routes) else None
    for route in routes:
        if route.namespace != owner or method not in route.methods.split():
            continue
        got = route.match(segments)
        if got is not None:
            return route, got
    return None


def _namespaces(routes: Sequence[Route]) -> set[str]:
    return {r.namespace for r in routes if r.namespace is not None}
