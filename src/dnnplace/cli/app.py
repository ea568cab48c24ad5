"""The ``dnnplace`` command line (typer + rich): a thin layer over :mod:`dnnplace.api`, one module per group.

It plans three models: the paper's placement of a DNN graph on accelerators and CPU cores
(``solve``, ``evaluate``, ``simulate``, ``report``, ``info``, ``compare``, ``reproduce``), Piper's
stages with data / tensor parallelism and recomputation (the same commands, on a Piper workload),
and LLM training (``plan`` on a Hugging Face config.json, then ``evaluate`` / ``simulate`` /
``report`` / ``export`` on the plan file).  PyTorch models are profiled into paper workloads and
run for real (``profile``, ``run``, ``export``).

The groups: :mod:`~dnnplace.cli.solve_cmd`, :mod:`~dnnplace.cli.judge_cmd`, :mod:`~dnnplace.cli.plan_cmd`,
:mod:`~dnnplace.cli.export_cmd`, :mod:`~dnnplace.cli.torch_cmd`, :mod:`~dnnplace.cli.experiments_cmd`,
:mod:`~dnnplace.cli.info_cmd`.  Every failure the user can cause ends in one line on stderr and exit
code 2; Ctrl-C in one line and exit 130, at any moment.
"""

from __future__ import annotations

import os
import sys

import typer

from dnnplace.cli import (
    experiments_cmd,
    export_cmd,
    info_cmd,
    judge_cmd,
    kernels_cmd,
    plan_cmd,
    serve_cmd,
    solve_cmd,
    torch_cmd,
)
from dnnplace.cli.console import OneLineUsageErrors, err, install_signal_handlers

app = typer.Typer(
    name="dnnplace",
    help=(
        "Plan how a deep-learning model is spread over devices, with a proven bound beside every answer."
        " Four models:\n\n"
        "- LLM serving on the GPUs you have, of several kinds: replicas, pipeline stages of mixed GPUs, TP, the"
        " uneven layer split and the engine's batch limits, exported to vLLM, SGLang, TensorRT-LLM, llama.cpp or"
        " a Hugging Face device_map;\n\n"
        "- the paper's placement (Tarnawski et al., NeurIPS 2020): which accelerator or CPU core runs each"
        " operator, for the best pipeline throughput or single-sample latency;\n\n"
        "- Piper's (NeurIPS 2021): stages with data and tensor parallelism and recomputation;\n\n"
        "- LLM training: TP x PP x VP x CP x EP x DP, ZeRO stage, micro-batch, recomputation and precision for a"
        " Hugging Face config.json (dense or mixture-of-experts) on a GPU system, exported to Megatron-LM,"
        " torchtitan or DeepSpeed.\n\n"
        "Start with:\n\n"
        "  dnnplace solve WORKLOAD.json -o plan.json (a paper or Piper workload)\n\n"
        "  dnnplace evaluate WORKLOAD.json plan.json\n\n"
        "  dnnplace plan config.json --gpus 64 --seq-len 8192 --global-batch 512 -o llm.json (or solve)\n\n"
        "  dnnplace export llm.json --to megatron\n\n"
        "  dnnplace serve config.json --gpus \"2xa100-80g+2xl40s\" -o serve.json (serving on mixed GPUs)\n\n"
        "  dnnplace export serve.json --to vllm"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=OneLineUsageErrors,
)

# in the order `dnnplace --help` lists them
judge_cmd.register_evaluate(app)
solve_cmd.register(app)
judge_cmd.register_simulate_report(app)
torch_cmd.register(app)
export_cmd.register(app)
experiments_cmd.register(app)
info_cmd.register(app)
plan_cmd.register(app)
serve_cmd.register(app)
kernels_cmd.register(app)


def _flush_stdout() -> str | None:
    """Flush stdout now, while an error can still be reported; the reason it failed, or None."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError) as exc:
        try:  # the interpreter's own flush at exit must not fail again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
        return getattr(exc, "strerror", None) or str(exc)
    return None


def main() -> None:
    """Console-script entry point."""
    try:
        try:
            install_signal_handlers()
            app(prog_name="dnnplace")
        except KeyboardInterrupt:  # Ctrl-C outside a command's guard (a lazy import, typer's own code)
            try:
                err.print("interrupted")
            except Exception:  # noqa: BLE001 - stderr gone: the exit code still says it
                pass
            raise SystemExit(130) from None
    except SystemExit as exc:
        failed = _flush_stdout()
        if failed is not None and exc.code in (0, None):
            try:
                err.print(f"error: cannot write to standard output ({failed})", soft_wrap=True)
            except Exception:  # noqa: BLE001 - stderr gone too: the exit code still says it
                pass
            raise SystemExit(2) from None
        if exc.code in (130, 128 + 1, 128 + 15):  # SIGINT, SIGHUP, SIGTERM
            import threading

            if any(t is not threading.main_thread() and t.is_alive() for t in threading.enumerate()):
                # Ctrl-C: a solver thread (HiGHS in its root LP) may not poll for cancellation for
                # seconds; nothing is left to write, so do not wait for it at interpreter exit.
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(int(exc.code))
        raise


if __name__ == "__main__":  # pragma: no cover
    main()
