"""The front end a tiny model ships beside its weights: the tokenizer (`tokenizer.py`), the
processor files (`processors.py`, `processor_files.py`, `media_tokens.py`) and the
sentence-transformers modules (`sentence.py`).

It sits below model/: make_tiny (model/build.py) calls it, and it reads nothing of the model's
internals; what it needs of the build (the choices, the tiny config) is passed in. The processor
check that runs the tiny model's forward stays in model/inputs/processor.py, with the other makers of its inputs.
"""
