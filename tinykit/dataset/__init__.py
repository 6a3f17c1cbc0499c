"""Tiny datasets: slice any Hub or local dataset, or synthesize one from a `Features` schema.

- `source.py`    resolve a Hub id / folder / files into configs and splits, and stream rows
- `select.py`    pick rows deterministically and representatively
- `media.py`     shrink images (<= 32 px long side) and audio (<= 1 s)
- `write.py`     write parquet plus a README.md card, atomically
- `build.py`     `make_tiny_dataset`, the pipeline above
- `synthetic.py` `make_synthetic_dataset`, rows drawn from `tinykit.strategies`

Nothing here is imported by `import tinykit`; `datasets` is imported inside functions.
"""
