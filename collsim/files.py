"""Reading the text files collsim is given (scenarios, presets, templates), with one set of error messages."""

from __future__ import annotations

from pathlib import Path

__all__ = ["FileReadError", "read_text_file"]


class FileReadError(ValueError):
    """A file that cannot be read as UTF-8 text; the message says why (the caller names the file)."""


def read_text_file(path: Path) -> str:
    """The text of ``path`` (UTF-8).

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
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileReadError("file not found") from None
    except UnicodeDecodeError:
        raise FileReadError("not a UTF-8 text file") from None
    except OSError as exc:
        raise FileReadError(f"cannot read file: {exc.strerror or exc}") from None
