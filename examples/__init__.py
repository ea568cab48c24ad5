"""Example models for dnnplace's PyTorch front end (no downloads)."""
