"""The shared JSON reader refuses what would hang it, exhaust memory or recurse (issue 33, item 16)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from hostile import deadline

from dnnplace.errors import InputError
from dnnplace.utils import files
from dnnplace.utils.files import read_json_file


def one_line(exc: pytest.ExceptionInfo[InputError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and len(msg) < 300, msg
    return msg


def test_a_fifo_is_refused_before_it_is_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    with deadline(), pytest.raises(InputError) as exc:
        read_json_file(fifo)
    assert "FIFO" in one_line(exc)


def test_a_fifo_behind_a_link_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "link.json").symlink_to(tmp_path / "fifo")
    with deadline(), pytest.raises(InputError) as exc:
        read_json_file(tmp_path / "link.json")
    assert "FIFO" in one_line(exc)


@pytest.mark.parametrize("dev", ["/dev/zero", "/dev/null", "/dev/urandom"])
def test_a_device_is_refused(dev: str) -> None:
    if not os.path.exists(dev):
        pytest.skip(f"no {dev}")
    with deadline(), pytest.raises(InputError) as exc:
        read_json_file(dev)
    assert "character device" in one_line(exc)


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.bind(str(path))
        except OSError:
            pytest.skip("cannot bind a unix socket here")
        with deadline(), pytest.raises(InputError) as exc:
            read_json_file(path)
    assert "socket" in one_line(exc)


def test_a_file_over_the_cap_is_refused_without_reading_it_all(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 1000)
    big = tmp_path / "big.json"
    big.write_text("[" + "1," * 1000 + "1]")
    with pytest.raises(InputError) as exc:
        read_json_file(big)
    assert "too large" in one_line(exc)


def test_deep_nesting_is_one_line(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(InputError) as exc:
        read_json_file(deep)
    assert "nested too deeply" in one_line(exc)


@pytest.mark.parametrize("name", ["a" * 5000, "d/" * 3000 + "x.json", "bad\0name.json"])
def test_a_name_the_system_refuses_is_one_line(tmp_path: Path, name: str) -> None:
    with pytest.raises(InputError) as exc:
        read_json_file(tmp_path / name)
    one_line(exc)


def test_a_regular_file_still_reads(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text('{"a": [1, 2]}')
    assert read_json_file(good) == {"a": [1, 2]}
