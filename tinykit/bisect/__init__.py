"""Bisect regressions: across released versions of a package, and across commits of a clone."""

from __future__ import annotations

__all__ = ["bisect_versions", "bisect_commits"]


def __getattr__(name: str):  # lazy: `import tinykit.bisect` stays free of subprocess work
    if name == "bisect_versions":
        from tinykit.bisect.versions import bisect_versions

        return bisect_versions
    if name == "bisect_commits":
        from tinykit.bisect.commits import bisect_commits

        return bisect_commits
    raise AttributeError(name)
