"""The Hugging Face Hub: `client.py` is tinykit's only huggingface_hub importer (downloads, pushes,
error translation, endpoint switching); `server/` is the loopback Hub that speaks the same protocol."""
