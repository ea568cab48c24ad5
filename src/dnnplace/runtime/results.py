"""What ``run`` returns: typed records (TypedDicts, so they stay plain JSON for ``--json``).

Times are milliseconds per sample unless named otherwise; ``error_*`` are measured / predicted - 1.
"""

from __future__ import annotations

from typing import TypedDict, final

from dnnplace.runtime.machine import MachineLoad


class ForwardStage(TypedDict):
    device: str
    operators: int
    measured_cpu_ms: float
    measured_runqueue_wait_ms: float


@final
class ForwardRunResult(TypedDict):
    """A forward-only pipeline run against the unsplit model."""

    outputs_match: bool
    measured_time_per_sample: float  # the median gap between consecutive outputs
    measured_mean_time_per_sample: float
    predicted_max_load: float | None
    prediction_source: str | None  # "workload", "split" or None
    measured_bottleneck_cpu_per_sample: float
    measured_mean_time_per_sample_less_runqueue_wait: float
    load_average: float | None
    machine: MachineLoad  # how busy the machine was while timed ("loaded": the wall clock is not the prediction's)
    microbatches: int
    stages: list[ForwardStage]
    backend: str
    unit: str


class SharedParameter(TypedDict):
    name: str
    stages: list[int]


class TrainingStage(TypedDict):
    device: str
    operators: int
    later_stages: int
    measured_forward_ms: float
    measured_backward_ms: float
    measured_blocked_ms: float
    measured_cpu_ms: float
    measured_compute_cpu_ms: float
    measured_runqueue_wait_ms: float
    predicted_forward_ms: float | None
    predicted_backward_ms: float | None
    measured_peak_activation_bytes: int
    measured_activation_bytes_per_microbatch: int
    predicted_peak_activation_bytes: int
    predicted_activation_bytes_per_microbatch: int
    microbatches_in_flight: int
    workload_peak_activation_bytes: int | None


@final
class TrainingRunResult(TypedDict):
    """A training run: losses, parameters and buffers against unsplit training, and the timing."""

    training: bool
    schedule: str
    microbatches: int
    steps: int
    optimizer: str
    lr: float
    losses: list[float]
    reference_losses: list[float]
    loss_match: bool
    params_match: bool
    max_param_rel_diff: float
    max_param_rel_diff_name: str | None  # the parameter that differs most (None: all equal)
    params_missing: list[str]
    buffers_match: bool
    max_buffer_rel_diff: float
    max_buffer_rel_diff_name: str | None
    buffers_missing: list[str]
    shared_parameters: list[SharedParameter]
    measured_time_per_sample: float
    measured_step_time_per_sample: float
    measured_time_per_sample_per_step: list[float]
    predicted_max_load: float | None
    predicted_simulated_time_per_sample: float | None
    prediction_source: str | None
    error_vs_max_load: float | None
    measured_bottleneck_cpu_per_sample: float
    measured_time_per_sample_less_runqueue_wait: float
    error_less_runqueue_vs_simulated: float | None
    error_cpu_vs_max_load: float | None
    load_average: float | None
    machine: MachineLoad  # how busy the machine was while timed ("loaded": the wall clock is not the prediction's)
    error_vs_simulated: float | None
    stages: list[TrainingStage]
    backend: str
    unit: str


RunResult = ForwardRunResult | TrainingRunResult
