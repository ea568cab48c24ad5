"""What every command shares: the two consoles, one-line errors with exit code 2, the progress bar."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x carries its own copy of click; its exceptions are the ones raised
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer on the real click
    from click import exceptions as click_errors  # type: ignore[no-redef]

from dnnplace.core.solver import ProgressFn
from dnnplace.errors import DnnplaceError, ParamError
from dnnplace.utils.text import SafeConsole, printable

# Everything shown goes through these: no markup or emoji codes in user text, control characters escaped.
out = SafeConsole()
err = SafeConsole(stderr=True)


_TERMINATED_BY = [0]  # the signal (SIGTERM, SIGHUP) that stopped the command, 0 for none or Ctrl-C


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM / SIGHUP: stop as Ctrl-C does (temporary files removed, workers stopped), exit 128 + signal."""
    import signal

    _TERMINATED_BY[0] = signum
    for sig in (signal.SIGTERM, signal.SIGHUP):  # a second one must not interrupt the clean-up
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def install_signal_handlers() -> None:
    """Let SIGTERM and SIGHUP unwind like SIGINT (only the main thread can install handlers)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is signal.SIG_DFL:
                signal.signal(sig, _terminate)


class OneLineUsageErrors(TyperGroup):
    """The command group: a usage mistake (unknown option, missing argument, a value click refuses) is one
    line on stderr and exit 2, like every other bad input, instead of click's usage block."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        kw = dict(prog_name=prog_name, complete_var=complete_var, windows_expand_args=windows_expand_args, **extra)
        if not standalone_mode:
            return super().main(args, standalone_mode=False, **kw)
        try:
            rv = super().main(args, standalone_mode=False, **kw)
        except click_errors.NoArgsIsHelpError as exc:  # bare `dnnplace CMD`: its help, as asked
            exc.show()
            sys.exit(exc.exit_code)
        except click_errors.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            where = f"{ctx.command_path}: " if ctx is not None else ""
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            message = " ".join(printable(exc.format_message()).split())
            err.print(f"error: {where}{message}{hint}", soft_wrap=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            err.print("aborted")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


def flag_name(param: str) -> str:
    """How the running command spells an API parameter: its option (``--time-limit``) or argument (``MODEL``).

    The CLI's options carry the API's parameter names, so the running command's own declaration
    answers; a parameter it does not show is written as the option it would be.
    """
    try:
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover - older typer on the real click
        from click import get_current_context  # type: ignore[no-redef]

    ctx = get_current_context(silent=True)
    for p in ctx.command.params if ctx is not None else ():
        if p.name == param:
            opts = [o for o in p.opts if o.startswith("--")] or list(p.opts)
            if p.param_type_name == "option":
                return max(opts, key=len)
            return str(getattr(p, "human_readable_name", p.name))
    return "--" + param.replace("_", "-")


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn library errors into one line on stderr and exit code 2."""
    try:
        yield
    except ParamError as exc:  # the API's own check, worded with this command's name for the parameter
        err.print(f"error: {exc.worded(flag_name(exc.param))}", soft_wrap=True)
        raise typer.Exit(2) from None
    except DnnplaceError as exc:
        err.print(f"error: {exc}", soft_wrap=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        signum = _TERMINATED_BY[0]
        if signum:
            import signal

            err.print(f"terminated ({signal.Signals(signum).name})")
            raise typer.Exit(128 + signum) from None
        err.print("interrupted")
        raise typer.Exit(130) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:  # a bug: still one line unless asked for the traceback
        if os.environ.get("DNNPLACE_DEBUG"):
            raise
        err.print(f"internal error: {exc.__class__.__name__}: {' '.join(printable(exc)[:500].split())}"
                  " (set DNNPLACE_DEBUG=1 for a traceback)", soft_wrap=True)
        raise typer.Exit(1) from None


@contextmanager
def progress_bar(enabled: bool) -> Iterator[ProgressFn | None]:
    """A transient rich progress bar on stderr, shown only on a terminal."""
    if not enabled or not err.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                  TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task("solving", total=1.0)

        def update(done: float, total: float, desc: str) -> None:
            bar.update(task, completed=done, total=total, description=printable(desc))

        yield update
