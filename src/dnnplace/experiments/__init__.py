"""Experiments on top of the public API: several methods side by side, and the paper's evaluation."""
