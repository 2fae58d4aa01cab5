"""Reading the text files collsim is given (scenarios, presets, templates), with one set of error messages; writing
its output files whole or not at all.

Output files are atomic
-----------------------
:func:`write_atomic` writes to a temporary file in the target's folder (``.<name>.<random>.tmp``), fsyncs it and
renames it onto the target with :func:`os.replace`: a reader, a crash, Ctrl-C or SIGTERM at any instant sees the
previous file or the complete new one, never a truncated one, and the temporary file is removed when anything
fails. The new file gets the previous file's permissions (else the usual ``0666 & ~umask``). A target that is a
symbolic link is written through (the file it points to is replaced); one that exists and is not a regular file
(``/dev/null``, ``/dev/stdout``, a FIFO) is written in place, as it cannot be renamed onto.
:func:`check_output_path` rejects, before any work, an output option naming a folder or a file in a folder that
does not exist.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["FileReadError", "OutputPathError", "check_output_path", "read_text_file", "signals_held", "write_atomic"]


class FileReadError(ValueError):
    """A file that cannot be read as UTF-8 text; the message says why (the caller names the file)."""


def read_text_file(path: Path, *, replace: bool = False) -> str:
    """The text of ``path`` (UTF-8; a leading byte-order mark, as Windows editors and Excel write, is dropped).

    Parameters
    ----------
    path : Path
        The file.
    replace : bool
        Replace undecodable bytes (U+FFFD) instead of refusing the file: for logs, whose other programs' lines may
        hold any bytes (a file with NUL bytes is still refused: it is binary).

    Raises
    ------
    FileReadError
        ``file not found``, ``not a UTF-8 text file`` or ``cannot read file: <reason>``.

    >>> read_text_file(Path("/nonexistent/x.yaml"))
    Traceback (most recent call last):
    ...
    collsim.files.FileReadError: file not found
    """
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace" if replace else "strict")
    except FileNotFoundError:
        raise FileReadError("file not found") from None
    except UnicodeDecodeError:
        raise FileReadError("not a UTF-8 text file") from None
    except OSError as exc:
        raise FileReadError(f"cannot read file: {exc.strerror or exc}") from None
    if replace and "\x00" in text:  # a binary file: no log holds NUL bytes
        raise FileReadError("not a UTF-8 text file")
    return text


class OutputPathError(OSError):
    """An output option that names something collsim cannot write a file to; the message names the option."""


def check_output_path(path: str | os.PathLike[str], option: str) -> None:
    """Refuse an output ``path`` given with ``option`` (``-o``, ``--trace`` ...) that cannot be a file.

    Raises
    ------
    OutputPathError
        When ``path`` is a folder, or its folder does not exist.

    >>> check_output_path("/", "-o")
    Traceback (most recent call last):
    ...
    collsim.files.OutputPathError: -o /: is a folder; expected a file name, e.g. /out.json
    """
    p = Path(path)
    text = os.fspath(path)
    if text == "" or p.is_dir() or text.endswith(("/", os.sep)):
        example = (p / "out.json").as_posix() if text else "out.json"
        raise OutputPathError(f"{option} {text or repr(text)}: is a folder; expected a file name, e.g. {example}")
    folder = p.expanduser().parent
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise OutputPathError(f"{option} {text}: the folder {folder} {why}")


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, encoding: str = "utf-8") -> None:
    """Write ``data`` (text, encoded with ``encoding``, or bytes) to ``path`` whole or not at all.

    See the module docstring: a temporary file in the same folder, fsync, :func:`os.replace`; on any failure or
    interrupt (KeyboardInterrupt, SystemExit) the temporary file is removed and ``path`` is left as it was.

    Raises
    ------
    OSError
        When the file cannot be written (the previous one, if any, is unchanged).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp()) / "out.txt"
    >>> write_atomic(p, "one\\n"); write_atomic(p, b"two\\n"); p.read_text(), sorted(f.name for f in p.parent.iterdir())
    ('two\\n', ['out.txt'])
    """
    raw = data.encode(encoding) if isinstance(data, str) else bytes(data)
    target = Path(os.path.realpath(os.path.expanduser(os.fspath(path))))  # a symbolic link: the file it names
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "is a folder, not a file", os.fspath(path))
    if st is not None and not stat.S_ISREG(st.st_mode):  # /dev/null, a FIFO, a terminal: cannot be renamed onto
        with open(target, "wb") as fh:
            fh.write(raw)
        return
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    with signals_held():  # the temporary file exists only once its name is known, so that it can be removed
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        except PermissionError:
            fd, tmp = -1, ""
        except OSError as exc:  # named as the file asked for, not the temporary one
            raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None
    if fd < 0:  # a folder this user cannot create files in, but a file in it that can be written: in place
        if st is None or not os.access(target, os.W_OK):
            raise PermissionError(13, "permission denied", os.fspath(path))
        with open(target, "wb") as fh:
            fh.write(raw)
        return
    try:
        with open(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        with signals_held():
            os.replace(tmp, target)
            tmp = ""
        _fsync_folder(target.parent)
    finally:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _umask() -> int:
    """The process's umask, read without changing it where /proc says it (Linux), else set and restored."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable (POSIX); best effort: some filesystems refuse to fsync a folder."""
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_HELD = {signal.SIGINT, signal.SIGTERM} | ({signal.SIGHUP} if hasattr(signal, "SIGHUP") else set())


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Delay SIGINT, SIGTERM and SIGHUP in this thread while the block runs (their handlers run on leaving it),
    where the platform can (POSIX): for the few steps that must not be cut in two (a file created and its name
    kept, a worker forked and registered)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
