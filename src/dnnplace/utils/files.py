"""Files in and out: the one way dnnplace reads a JSON input and the one way it writes any output.

:func:`read_json_file` reads every JSON input: size-capped, UTF-8, one-line errors (:func:`read_text_file`
another text input, the same way).

Writing is atomic, never through a link, never over an input.

Every output (splits, workloads, reports, traces, tables, figures) goes through
:func:`write_bytes_atomic` (or its text / JSON wrappers):

* the data goes to a fresh temporary file in the target's folder, created
  exclusively (``tempfile.mkstemp``: ``O_CREAT | O_EXCL | O_NOFOLLOW``, a random
  name), so a planted symlink, directory or another writer's temporary file is
  never touched;
* it is flushed and fsynced, then renamed over the target with ``os.replace``,
  so readers see the old file or the complete new one, and concurrent writers
  each end with a complete file (the last rename wins) and a truthful result;
* the target must be absent or a regular file: a symlink, directory, device
  node, FIFO or socket is refused, not replaced;
* the target must not be any of the ``inputs`` (same path after resolving
  links, or the same file by device and inode), so ``solve w.json -o w.json``
  cannot destroy the workload;
* on any failure (including Ctrl-C) the temporary file is removed and the old
  target is left as it was.

Failures raise :class:`~dnnplace.errors.InputError` with a one-line message.
:func:`check_outputs` runs the same refusals up front, so a command can refuse
before spending minutes on a solve.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dnnplace.errors import InputError
from dnnplace.utils.text import clip

PathLike = str | os.PathLike

_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def _shown(p: PathLike) -> str:
    from dnnplace.utils.text import printable

    return printable(os.fspath(p))


def _kind(mode: int) -> str | None:
    """What a non-regular file is, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"  # pragma: no cover - no other kinds on POSIX


def _same_file(a: PathLike, b: PathLike) -> bool:
    """True when ``a`` and ``b`` name the same file (resolved path, or device + inode)."""
    try:
        if Path(a).resolve() == Path(b).resolve():
            return True
    except (OSError, RuntimeError, ValueError):
        pass
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def check_output(path: PathLike, inputs: Iterable[PathLike | None] = ()) -> None:
    """Refuse a target that is not a regular file or that is one of ``inputs``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except (OSError, ValueError) as exc:
        raise InputError(f"{_shown(path)}: cannot write file ({getattr(exc, 'strerror', None) or exc})") from None
    if st is not None:
        kind = _kind(st.st_mode)
        if kind is not None:
            raise InputError(f"{_shown(path)}: is {kind}, not a regular file; refusing to replace it")
    for src in inputs:
        if src is not None and _same_file(path, src):
            raise InputError(f"{_shown(path)}: the output is the input file {_shown(src)}; refusing to overwrite it")


def check_outputs(outputs: Iterable[PathLike | None], inputs: Iterable[PathLike | None] = ()) -> None:
    """:func:`check_output` for every output, and no two outputs the same file."""
    outs = [o for o in outputs if o is not None]
    ins = [i for i in inputs if i is not None]
    for i, o in enumerate(outs):
        check_output(o, ins)
        for other in outs[:i]:
            if _same_file(o, other):
                raise InputError(f"{_shown(o)}: given for two different outputs; refusing to write it twice")


def _file_mode() -> int:
    """0o666 less the umask (mkstemp creates 0o600), read without changing it where possible."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # pragma: no cover - non-Linux fallback
    os.umask(mask)  # pragma: no cover
    return 0o666 & ~mask  # pragma: no cover


def write_bytes_atomic(path: PathLike, data: bytes, *, inputs: Iterable[PathLike | None] = ()) -> None:
    """Write ``data`` to ``path`` atomically (see the module docstring for the guarantees)."""
    write_chunks_atomic(path, [data], inputs=inputs)


def write_chunks_atomic(path: PathLike, chunks: Iterable[bytes | str], *,
                        inputs: Iterable[PathLike | None] = ()) -> None:
    """Write ``chunks`` (bytes, or text as UTF-8) one after another to ``path`` atomically, as
    :func:`write_bytes_atomic` does: a large output (a trace of millions of events) streams to its file
    without ever being whole in memory, and a failure midway leaves the old target untouched."""
    target = Path(path)
    check_output(target, list(inputs))
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)  # replacing a file keeps its permissions
    except (OSError, ValueError):
        mode = _file_mode()
    folder = target.parent
    fd = -1
    tmp: str | None = None
    try:
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:100]}.", suffix=".tmp", dir=folder)
            os.fchmod(fd, mode)
            for chunk in chunks:
                view = memoryview(chunk.encode("utf-8", errors="replace") if isinstance(chunk, str) else chunk)
                while view:
                    view = view[os.write(fd, view):]
            os.fsync(fd)
            os.close(fd)
            fd = -1
            # A link or special file may have appeared meanwhile: os.replace never follows it,
            # but refuse rather than silently swap it for a regular file.
            check_output(target)
            os.replace(tmp, target)
            tmp = None
        except OSError as exc:
            raise InputError(f"{_shown(target)}: cannot write file ({exc.strerror or exc})") from None
        try:
            dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def write_text_atomic(path: PathLike, text: str, *, inputs: Iterable[PathLike | None] = ()) -> None:
    """Write UTF-8 text atomically."""
    write_bytes_atomic(path, text.encode("utf-8", errors="replace"), inputs=inputs)


def write_json_atomic(path: PathLike, obj: Any, *, inputs: Iterable[PathLike | None] = ()) -> None:
    """Write standard JSON (indent 1, a trailing newline; NaN and infinity as null) atomically."""
    from dnnplace.utils.text import json_safe

    write_text_atomic(path, json.dumps(json_safe(obj), indent=1, allow_nan=False) + "\n", inputs=inputs)


MAX_FILE_BYTES = 256 * 2**20  # an input file larger than this is refused before parsing


def read_text_file(path: str | Path, kind: str = "text") -> str:
    """A UTF-8 text file's content, read as :func:`read_json_file` reads one: a regular file only, size-capped,
    one-line errors (``kind`` names the file expected in them)."""
    p = Path(path)
    shown = clip(p)
    try:
        mode = _kind(os.stat(p).st_mode)
        if mode == "a directory":
            raise IsADirectoryError
        if mode is not None:
            raise InputError(f"{shown}: is {mode}, not a regular file; give a {kind} file")
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        with open(fd, "rb") as fh:
            mode = _kind(os.fstat(fd).st_mode)
            if mode is not None:
                raise InputError(f"{shown}: is {mode}, not a regular file; give a {kind} file")
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InputError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{shown}: is a directory, not a {kind} file") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{shown}: cannot read file ({getattr(exc, 'strerror', None) or exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise InputError(f"{shown}: larger than {MAX_FILE_BYTES // 2**20} MiB, too large for a {kind} input")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{shown}: not UTF-8 text (byte {exc.start})") from None
    return text


def read_json_file(path: str | Path) -> Any:
    """Parse a JSON file, turning I/O and syntax problems into one-line errors.

    Only a regular file is read: a FIFO, a device or a socket is refused before it is opened (opening
    one can block for ever or never reach its end), and the file is opened non-blocking and checked again
    by its descriptor, so a FIFO swapped in between the two checks cannot hang the reader either.
    """
    shown = clip(Path(path))
    text = read_text_file(path, "JSON")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{shown}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise InputError(f"{shown}: not valid JSON: nested too deeply") from None
    except (ValueError, MemoryError) as exc:  # e.g. an integer longer than Python's digit limit
        raise InputError(f"{shown}: not valid JSON: {clip(exc, 120)}") from None
