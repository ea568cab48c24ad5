"""The paper's model (SPEC.md): a DNN graph placed on accelerators and CPU cores."""
