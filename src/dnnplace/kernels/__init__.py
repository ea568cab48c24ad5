"""Measured kernel costs (placeholder until the layer lands)."""
