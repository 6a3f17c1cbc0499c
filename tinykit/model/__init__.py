"""Tiny random-weight models: the spec, recipes, config shrinking, layer plans, build, provenance,
verify and the model-type coverage sweep. Tokenizers and datasets are the sibling packages."""
