"""Piper's multidimensional model (PIPER-SPEC.md): stages, data and tensor parallelism."""
