"""Ctrl-C at any moment of a CLI run -- even outside a command's own guard -- ends in one line and exit 130."""

from __future__ import annotations

import pytest

from dnnplace.cli import app as cli


def test_an_interrupt_outside_a_command_guard_is_one_line_and_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # as if it came during a lazy import inside typer's dispatch

    monkeypatch.setattr(cli, "app", interrupted)
    monkeypatch.setattr(cli, "install_signal_handlers", lambda: None)  # leave the test process's handlers alone
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 130
    err = capsys.readouterr().err
    assert err.strip() == "interrupted"
    assert "Traceback" not in err
