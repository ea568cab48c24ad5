"""PyTorch front end: capture an ``nn.Module`` as an operator DAG and profile it.

torch is an optional dependency (``pip install dnnplace[torch]``); nothing in
the core imports this package.
"""
