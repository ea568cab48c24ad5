"""What the launcher hands each worker process: typed, picklable, built once by the parent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ForwardPayload:
    """A forward-only pipeline run: the stage plan, the tensors crossing stages, the inputs."""

    plan: Any  # runtime.stages.StagePlan
    shapes: dict[str, tuple[Any, Any]]  # fx name -> (shape, dtype) of each value sent between stages
    inputs: tuple  # the model's flattened example inputs
    microbatches: int
    warmup: int


@dataclass(frozen=True)
class TrainPayload:
    """A training run: the stage plan, the schedule's task order per stage, the optimizer and the loss."""

    plan: Any  # runtime.stages.StagePlan
    shapes: dict[str, tuple[Any, Any]]
    args: tuple  # the model's flattened example inputs
    grad_values: set  # fx names whose gradient crosses a stage boundary
    tags: dict[str, int]  # fx name -> message tag
    out_spec: bytes  # the pickled pytree spec of the model's output
    loss_spec: str | None  # MODULE:FACTORY whose loss_fn to use (None: the default loss)
    microbatches: int
    steps: int
    optimizer: str
    lr: float
    schedule: Any  # simulation.schedule.Schedule: per stage, its actions in issue order
    module_training: list[bool]  # per stage: train() or eval() mode, as the unsplit model
    node_index: dict[str, int]  # fx name -> position in the graph (receive order)
    shared: list = field(default_factory=list)  # (ranks, {rank: parameter name}) held by several stages
    pin: bool = False  # bind each worker to a core of its own
    threads: int = 1  # intra-op threads per worker
