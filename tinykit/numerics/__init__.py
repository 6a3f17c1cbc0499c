"""Numerics: `record.py` (per-module forward/backward recorder) and `compare.py` (the one tensor
comparer used by snapshots, determinism checks and dump diffs)."""
