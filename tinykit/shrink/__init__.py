"""Build tiny artifacts: configs and random-weight models (tokenizers and datasets live beside)."""
