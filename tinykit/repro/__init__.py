"""Reproducibility: `seed.py` (seeding and RNG state), `determinism.py` (run twice, name the first
diverging module), `env.py` (environment capture and diff) and `redact.py` (secrets kept out)."""
