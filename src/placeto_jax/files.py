"""Atomic file writing: a file appears complete under its final name, or not at all."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

STDOUT = "-"  # the path that names standard output


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Yield a binary file created next to `path`. On normal exit it is flushed, fsynced and
    renamed over `path` (`os.replace`); on any error it is removed and `path` is left as it was.
    Atomic replacement is for regular files: a symlink is followed to its target; an existing
    path that is not a regular file (a device, a FIFO) is written through, as is "-" (standard
    output); a directory is refused."""
    if os.fspath(path) == STDOUT:
        yield _Unclosed(sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return
    try:
        mode = os.stat(path).st_mode  # through symlinks (/dev/stdout: a pipe, a terminal)
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(path))
    if mode is not None and not stat.S_ISREG(mode):
        try:
            with open(path, "wb") as file:  # a device or a FIFO: written, never replaced
                yield file
        except OSError as err:  # /dev/full: no space left
            raise _naming(err, path) from None
        return
    target = Path(os.path.realpath(path))  # a symlink's target is replaced, not the link
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as err:  # report the file the caller asked for, not the temp file
        raise OSError(err.errno, err.strerror, os.fspath(path)) from None
    try:
        with os.fdopen(fd, "wb") as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, target)
    except OSError as err:  # a full disk, a file-size limit (ulimit -f: EFBIG)
        tmp.unlink(missing_ok=True)
        raise _naming(err, path) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _naming(err: OSError, path: str | os.PathLike) -> OSError:
    """`err` when it names a file; else the same error naming `path`, the file asked for."""
    if err.filename is not None or err.errno is None:
        return err
    return OSError(err.errno, err.strerror, os.fspath(path))


class _Unclosed:
    """A binary stream that its user cannot close (standard output stays open)."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream

    def write(self, data: bytes) -> int:
        return self._stream.write(data)

    def flush(self) -> None:
        self._stream.flush()


def write_json(path: str | os.PathLike, payload: object) -> None:
    """`payload` as indented JSON at `path` (its folder created), atomically; it is encoded
    before anything is written, so a payload that is not JSON leaves no file."""
    text = json.dumps(payload, indent=1) + "\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as file:
        file.write(text.encode())


def write_result(path: str | os.PathLike, payload: dict, argv: Sequence[str] | None = None) -> None:
    """`payload` with a "provenance" key (commit, command line, library versions, time; see
    `placeto_jax.provenance`) added, as `write_json` writes it. The payload is not modified;
    one with its own "provenance" key is refused (ValueError)."""
    from placeto_jax.provenance import provenance

    if "provenance" in payload:
        raise ValueError(f'{os.fspath(path)}: the payload has its own "provenance" key')
    write_json(path, {**payload, "provenance": provenance(argv)})
