"""Numerics: the per-module recorder (`recorder.py`, with `summary.py`, `stats.py`, `backward.py`),
`tinykit.record` and its dumps, `tinykit.detect_anomalies`, and `compare.py` (the one tensor
comparer used by snapshots, determinism checks and dump diffs)."""
