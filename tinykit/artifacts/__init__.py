"""Built artifacts: `cache.py` (a content-addressed store: key, lookup, build-once under a lock)
and `named.py` (the named fixtures of fixtures/*.toml: build through the cache, verify, lock)."""
