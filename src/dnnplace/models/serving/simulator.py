"""A discrete-event simulation of an engine serving requests at a rate (stub: its owner's version replaces it).

Why a stub here: the plan file, ``dnnplace simulate`` and the protocol call :func:`simulate` by this
signature; until the simulator lands it says so in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dnnplace.errors import DnnplaceError
from dnnplace.models.serving.spec import ServingConfig, ServingProblem

__all__ = ["Simulation", "simulate"]


@dataclass
class Simulation:
    """Requests streamed through a deployment: throughput and TTFT / TPOT percentiles."""

    rate: float
    requests: int
    completed: int = 0
    preemptions: int = 0
    saturated: bool = False
    output_tokens_per_s: float = 0.0
    requests_per_s: float = 0.0
    ttft_ms: dict[str, float] = field(default_factory=dict)
    tpot_ms: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The simulation as one JSON object."""
        return {"rate": self.rate, "requests": self.requests, "completed": self.completed,
                "preemptions": self.preemptions, "saturated": self.saturated,
                "output_tokens_per_s": self.output_tokens_per_s, "requests_per_s": self.requests_per_s,
                "ttft_ms": dict(self.ttft_ms), "tpot_ms": dict(self.tpot_ms)}

    def summary(self) -> list[str]:
        """Lines for the screen."""
        return [f"{k}: {v}" for k, v in self.to_dict().items()]


def simulate(p: ServingProblem, config: ServingConfig, *, rate: float, requests: int = 2000, seed: int = 0,
             time_limit: float = 60.0) -> Simulation:
    """Stream ``requests`` Poisson arrivals at ``rate`` requests/s through ``config``."""
    raise DnnplaceError("the serving simulator is not built yet")
