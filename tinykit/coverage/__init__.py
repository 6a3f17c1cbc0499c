"""The model-type sweep behind `tinykit coverage`: build, verify and size every type."""
