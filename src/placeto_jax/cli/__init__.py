"""The `placeto-jax` command line: `simulate` one placement, `demo` the baseline placers,
`graphs list|show|export|plot` to inspect the built-in graphs, `train`, `place`, `eval` for the
learned policy, `reproduce` the paper's experiments, `sweep` a grid of settings and `execute` a
placement of a zoo model for real on the local devices.

Every parser and every text or JSON formatter lives in this package (`format.py` formats);
the work is done by the library, drawing by `placeto_jax.plotting`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType

from placeto_jax.cli.options import PROG

CLOSED_PIPE = 141  # 128 + SIGPIPE, as Unix tools exit when their reader goes away
INTERRUPTED = 130  # 128 + SIGINT


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Errors in the input (graph spec or file, placement, preset, device count) and I/O failures
    (a folder that cannot be written, a full disk, an unreachable coordinator) print one line,
    `placeto-jax: error: ...`, to stderr and return 2; an interrupted `train` returns 130 after
    saving a checkpoint, and a Ctrl-C at any other time prints one line and returns 130 (while
    the commands are imported, it exits at once). When the reader of stdout goes away
    (`placeto-jax graphs list | head -1`), the rest of the output is dropped without a
    traceback and the status is 141 (128 + SIGPIPE, like Unix tools). Output files are written
    atomically. The simulator runs in float64 (`simulate`'s default), so the numbers are exact;
    no command sets JAX's global `jax_enable_x64` flag.
    """
    with _exit_at_once_on_ctrl_c():
        top = parser()  # imports every command, JAX with them: seconds
    with _swallowed_ctrl_c_sent_again():
        try:
            args = top.parse_args(argv)
            check_seed(getattr(args, "seed", None))
            status = args.command(args)
            sys.stdout.flush()  # a closed pipe shows here when the output fitted the buffer
        except BrokenPipeError:
            return _drop_output()
        except KeyboardInterrupt:  # Ctrl-C before `train` catches it, or a second one
            print(f"{PROG}: interrupted (nothing written since the last checkpoint)",
                  file=sys.stderr)  # fmt: skip
            return INTERRUPTED
        except ValueError as err:
            return _fail(err, 2)
        except OSError as err:
            return _fail(err, 2)
    return status


def parser() -> argparse.ArgumentParser:
    """The parser of every command (importing them imports JAX)."""
    import importlib.metadata

    from placeto_jax.cli.agent import add_agent_commands
    from placeto_jax.cli.execute import add_execute_command
    from placeto_jax.cli.graphs import add_graphs_command
    from placeto_jax.cli.reproduce import add_reproduce_command
    from placeto_jax.cli.simulate import add_simulate_commands
    from placeto_jax.cli.sweep import add_sweep_command

    top = argparse.ArgumentParser(
        prog=PROG,
        description="Learned device placement (Placeto) with a vectorised JAX simulator.",
    )
    version = importlib.metadata.version("placeto-jax")
    top.add_argument("--version", action="version", version=f"{PROG} {version}")
    commands = top.add_subparsers(title="commands", required=True, metavar="COMMAND")
    add_simulate_commands(commands)
    add_graphs_command(commands)
    add_agent_commands(commands)
    add_reproduce_command(commands)
    add_sweep_command(commands)
    add_execute_command(commands)
    return top


def check_seed(seed: int | None) -> None:
    """ValueError unless `seed` (when given) is a JAX key's seed: in [0, 2^63)."""
    if seed is not None and not 0 <= seed < MAX_SEED:
        raise ValueError(f"--seed must be in [0, 2^63), got {seed}")


MAX_SEED = 1 << 63


def _python_answers_ctrl_c() -> bool:
    """Python's own SIGINT handler is installed (SIGINT is not ignored), in the main thread."""
    return (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )


@contextlib.contextmanager
def _exit_at_once_on_ctrl_c() -> Iterator[None]:
    """A Ctrl-C during the block (the commands' imports: nothing is written yet) prints one line
    and exits with 130 at once: a KeyboardInterrupt raised there can crash the process (inside
    jaxlib's start) or be swallowed (below)."""
    if not _python_answers_ctrl_c():
        yield
        return
    signal.signal(signal.SIGINT, _exit_at_once)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    os.write(2, f"{PROG}: interrupted while starting up\n".encode())
    os._exit(INTERRUPTED)


@contextlib.contextmanager
def _swallowed_ctrl_c_sent_again() -> Iterator[None]:
    """Python swallows an exception raised in a garbage-collection callback, a finaliser or a
    weakref callback, and JAX runs a callback on every collection: a KeyboardInterrupt that
    Python swallows during the block is sent again, as SIGINT, 10 ms later."""
    if not _python_answers_ctrl_c():
        yield
        return
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if not issubclass(unraisable.exc_type, KeyboardInterrupt):
            previous(unraisable)
            return
        main = threading.main_thread().ident
        again = threading.Timer(0.01, signal.pthread_kill, (main, signal.SIGINT))
        again.daemon = True
        again.start()

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _fail(err: Exception, status: int) -> int:
    message = " ".join(str(err).split())
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status


def _drop_output() -> int:
    """Point stdout at os.devnull, so that Python's flush at exit does not fail again (as the
    `signal` module's docs advise), and return CLOSED_PIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_PIPE
