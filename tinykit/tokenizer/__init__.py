"""Tiny tokenizers: `build.py` (make_tiny_tokenizer), `source.py` (read every tokenizer layout),
`edit.py` (structured tokenizer.json editing), `files.py` (SentencePiece/tiktoken/vocab files),
`train.py` (learning a vocabulary from scratch) and `check.py` (round-trip and special-token checks)."""
