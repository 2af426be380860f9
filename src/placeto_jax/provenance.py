"""Provenance of a result: the commit it measured, the command that produced it, the library
versions and the time. Host-side and cheap (two `git` calls, a few metadata lookups)."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent  # src/placeto_jax
LIBRARIES = ("placeto_jax", "jax", "jaxlib", "flax", "optax", "jraph", "numpy")


def git(*argv: str, cwd: Path = PACKAGE) -> str | None:
    """`git argv` run in `cwd`: its stdout without trailing whitespace, or None when git fails
    or is missing."""
    try:
        out = subprocess.run(
            ["git", *argv], cwd=cwd, capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.rstrip()


def repository() -> Path | None:
    """The root of the git checkout that holds this package's source, or None (an installed
    copy, or a checkout of something else around it)."""
    top = git("rev-parse", "--show-toplevel")
    if top is None or (Path(top) / "src" / "placeto_jax").resolve() != PACKAGE:
        return None
    return Path(top)


def commit_and_dirty() -> tuple[str | None, bool | None]:
    """(HEAD's sha, whether tracked files outside results/ differ from it); (None, None)
    outside the package's checkout."""
    root = repository()
    if root is None:
        return None, None
    sha = git("rev-parse", "HEAD", cwd=root)
    status = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results", cwd=root)
    return sha, None if status is None else bool(status)


def process_start() -> float | None:
    """Epoch seconds at which this process started (Linux /proc), or None elsewhere."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def commit_at_start() -> str | None:
    """The newest commit of HEAD's history made before this process started: the code a long
    run measured when commits landed while it ran; None when unknown. The start is known to
    within a second (the boot time is whole seconds), so a commit of the second after it counts
    as before: a run launched right after a commit measured that commit."""
    root, started = repository(), process_start()
    if root is None or started is None:
        return None
    return git("rev-list", "-1", f"--before=@{int(started) + 1}", "HEAD", cwd=root) or None


def versions(libraries: Sequence[str] = LIBRARIES) -> dict[str, str | None]:
    """Python's version and each library's installed version (None: not installed)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in libraries:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def command(argv: Sequence[str] | None = None) -> str:
    """`argv` (default: the interpreter's name and `sys.argv`) as one shell-quoted line."""
    if argv is None:
        argv = [Path(sys.executable).name, *sys.argv]
    return shlex.join(argv)


def provenance(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """{"commit", "dirty", "command", "versions", "utc"} of a result written now by the command
    `argv` (default: this process's). "commit" is HEAD when the process started; where HEAD
    moved since, "commit_at_write" names it too ("dirty" is the tree at write time)."""
    sha, dirty = commit_and_dirty()
    started = commit_at_start() or sha
    moved = {"commit_at_write": sha} if started != sha else {}
    utc = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {
        **moved,
        "commit": started,
        "dirty": dirty,
        "command": command(argv),
        "versions": versions(),
        "utc": utc,
    }
