"""Run a placed model for real: one process per device, torch.distributed send/recv between them."""
