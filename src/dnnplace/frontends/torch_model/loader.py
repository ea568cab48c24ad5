"""Load ``MODULE:FACTORY`` -- a Python file or dotted module, and a function returning (model, inputs)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from dnnplace.errors import DnnplaceError


def require_torch():
    """Import torch or explain how to get it."""
    try:
        import torch
    except ImportError:
        raise DnnplaceError("this command needs PyTorch: pip install 'dnnplace[torch]'") from None
    return torch


def load_factory(spec: str) -> tuple[Any, tuple]:
    """Call the factory named by ``spec`` and check that it returned (model, tuple of tensors)."""
    torch = require_torch()
    if ":" not in spec:
        raise DnnplaceError(f"'{spec}': expected MODULE:FACTORY (a .py file or dotted module, a colon, a function)")
    module_name, _, func_name = spec.rpartition(":")
    try:
        if module_name.endswith(".py") or "/" in module_name:
            path = Path(module_name)
            if not path.exists():
                raise DnnplaceError(f"'{spec}': no such file {path}")
            name = f"dnnplace_user_{path.stem}"
            mod_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module
            mod_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except DnnplaceError:
        raise
    except Exception as exc:  # the user's module failed to import
        raise DnnplaceError(f"'{spec}': cannot import {module_name}: {exc.__class__.__name__}: {exc}") from None
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise DnnplaceError(f"'{spec}': {module_name} has no function '{func_name}'")
    torch.manual_seed(0)
    try:
        result = factory()
    except Exception as exc:
        raise DnnplaceError(f"'{spec}': the factory failed: {exc.__class__.__name__}: {exc}") from None
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        raise DnnplaceError(f"'{spec}': the factory must return (model, example_inputs)")
    model, inputs = result
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, tuple) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise DnnplaceError(f"'{spec}': example_inputs must be a tuple of tensors")
    return model, inputs
