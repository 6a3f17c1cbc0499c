"""Serve a stand-in manifest from the artifact cache on a running loopback Hub, nothing copied.

    served = add_manifest(hub, "tests/standins.toml")   # {"org/name": cached folder, ...}

The loopback Hub (`tinykit.hub.server`) serves folders and knows no builders. This module
builds a manifest's entries through the artifact cache (on a miss; a second call, in this
session or the next, only looks them up) and mounts each cached folder at its repo id and
branch. `HubServer` here is the public `tinykit.HubServer` and the `tiny_hub` fixture's
server: the folder-serving one plus an `add_manifest` method.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from tinykit.hub import server

if TYPE_CHECKING:
    from tinykit.artifacts.cache import Cache
    from tinykit.standins.manifest import Manifest


def add_manifest(
    hub: server.HubServer, manifest: str | os.PathLike[str] | Manifest, cache: Cache | None = None
) -> dict[str, Path]:
    """Serve every repo of `manifest` on `hub`, each from its folder in `cache` (default:
    TINYKIT_CACHE, else ~/.cache/tinykit), built there first on a miss.

    Returns:
        `{"org/name" or "org/name@branch": cached folder}`.
    """
    from tinykit.artifacts.cache import Cache
    from tinykit.standins.build import built_entries
    from tinykit.standins.manifest import Manifest, load_manifest

    parsed = manifest if isinstance(manifest, Manifest) else load_manifest(manifest)
    served: dict[str, Path] = {}
    for entry, revision, folder, _, _ in built_entries(parsed, cache or Cache()):
        hub.store.mount(entry.repo_type, entry.repo_id, folder, revision)
        served[entry.repo_id + ("" if revision == "main" else f"@{revision}")] = folder
    return served


class HubServer(server.HubServer):
    """A loopback Hub (`tinykit.hub.server.HubServer`) that also serves stand-in manifests."""

    cache_dir: Path | None = None  # add_manifest's artifact cache (the tiny_hub fixture sets it)

    def add_manifest(
        self, manifest: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None
    ) -> dict[str, Path]:
        """Serve every repo of a stand-in manifest (`tinykit.standins`), built on a cache miss
        into the artifact cache (`cache_dir`, default `self.cache_dir`, else TINYKIT_CACHE) and
        mounted from there: a second call, in this session or the next, only looks them up.
        Returns `{"org/name" or "org/name@branch": cached folder}`."""
        from tinykit.artifacts.cache import Cache

        return add_manifest(
            self, manifest, Cache(cache_dir if cache_dir is not None else self.cache_dir)
        )
