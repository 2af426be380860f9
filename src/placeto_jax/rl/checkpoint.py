"""A run directory: its resolved config (`run.json`), a lock, and checked orbax checkpoints.

Layout of WORKDIR:
  run.json                format version, resolved config, graph names and content digests,
                          the cluster trained for (a cluster file's object)
  train.lock              the pid and host of the `train` that holds the directory
  checkpoints/STEP/       orbax: `state` (the whole TrainState) and `params` (policy only)
  checkpoints/STEP/integrity.json   SHA-256 of both items' arrays, the config and graph digests
  metrics.jsonl           one JSON object per update (see rl/loop.py)
  tb/                     TensorBoard event files
  learning_curve.png      the same metrics drawn when a training call ends (not when it fails)

A policy is rebuilt from WORKDIR alone: `load_run` gives the config, `restore_params` the weights.

Integrity: a checkpoint step is intact when every file orbax wrote for the item being read (and
the step's own metadata) has the SHA-256 recorded after the save, orbax restores it, and the
restored arrays hash to their recorded digest. Training resumes from the newest intact step
(saying which steps it skipped); `place`/`eval` read only the newest and refuse a damaged one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import resource
import shutil
import socket
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config, from_dict, to_dict
from placeto_jax.files import atomic_write

RUN_FORMAT = 1
INTEGRITY = "integrity.json"


def run_file(workdir: str | os.PathLike) -> Path:
    return Path(workdir) / "run.json"


def config_digest(config: Config) -> str:
    """SHA-256 (hex) of the resolved config."""
    return hashlib.sha256(json.dumps(to_dict(config), sort_keys=True).encode()).hexdigest()


def write_run(
    workdir: str | os.PathLike,
    config: Config,
    names: Sequence[str],
    digests: Sequence[str],
    cluster: Cluster,
) -> None:
    """Write run.json, or check that an existing one describes the same run (resuming): the
    same config, graph names, graph contents (`Graph.digest` of each graph's op graph) and
    cluster. ValueError if `config` names another cluster preset than `cluster` is."""
    if config.cluster_preset != cluster.preset_name():
        raise ValueError(
            f"the config names cluster {config.cluster_preset!r}, but the run trains for "
            f"{cluster.preset_name()!r} ({cluster.name}, {cluster.n_devices} devices); give the "
            "config cluster_preset=cluster.preset_name()"
        )
    path = run_file(workdir)
    doc = {
        "format": RUN_FORMAT,
        "config": to_dict(config),
        "graphs": list(names),
        "graph_digests": list(digests),
        "cluster": cluster.document(),
    }
    if path.exists():
        _check_same_run(workdir, doc)
        return
    with atomic_write(path) as f:
        f.write(json.dumps(_jsonable(doc), indent=2).encode())


def _check_same_run(workdir: str | os.PathLike, doc: dict) -> None:
    old = _read_run(workdir)
    if list(old["graphs"]) != doc["graphs"]:
        raise ValueError(
            f"{workdir} holds a run on other graphs ({', '.join(old['graphs'])}); resume it "
            "with the same --graphs or use a new --workdir"
        )
    differs = _differences(_with_defaults(old["config"]), _jsonable(doc["config"]))
    if differs:
        raise ValueError(
            f"{workdir} holds a run with another config ({'; '.join(differs[:3])}); resume it "
            "with the same arguments or use a new --workdir"
        )
    if old.get("cluster", doc["cluster"]) != _jsonable(doc["cluster"]):
        raise ValueError(
            f"{workdir} holds a run for another cluster ({old['cluster']['name']}, "
            f"{old['cluster']['n_devices']} devices); resume it on the same cluster or use a "
            "new --workdir"
        )
    for name, before, now in zip(
        doc["graphs"], old.get("graph_digests", doc["graph_digests"]), doc["graph_digests"],
        strict=True,
    ):  # fmt: skip
        if before != now:
            raise ValueError(
                f"graph {name!r} has changed since the run in {workdir} started (its content "
                "digest differs); train on it in a new --workdir"
            )


def _with_defaults(stored: dict) -> dict:
    """A stored config document with the fields it predates at their defaults (a run by an
    earlier version, whose behaviour those defaults keep); as stored when it does not read."""
    try:
        return _jsonable(to_dict(from_dict(stored)))
    except (TypeError, ValueError):
        return stored


def _differences(before: Any, now: Any, prefix: str = "") -> list[str]:
    """ "KEY: BEFORE there, NOW here" for every field of two config documents that differs."""
    if isinstance(before, dict) and isinstance(now, dict):
        out = []
        for key in sorted(set(before) | set(now)):
            out += _differences(before.get(key), now.get(key), f"{prefix}{key}.")
        return out
    if before != now:
        return [f"{prefix.rstrip('.')}: {before!r} there, {now!r} here"]
    return []


def load_run(workdir: str | os.PathLike) -> tuple[Config, list[str]]:
    """(config, graph names) of a run directory; ValueError if it is missing or unreadable."""
    doc = _read_run(workdir)
    try:
        return from_dict(doc["config"]), list(doc["graphs"])
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"corrupt {run_file(workdir)}: {err}") from None


def load_cluster(workdir: str | os.PathLike, config: Config) -> Cluster:
    """The cluster a run trained for: the one in its run.json, or (a run that predates it)
    `config`'s preset; ValueError if it is unreadable."""
    doc = _read_run(workdir).get("cluster")
    if doc is None:
        return Cluster.preset(config.cluster_preset, config.n_devices)
    return Cluster.from_document(doc, f"the cluster in {run_file(workdir)}")


def _read_run(workdir: str | os.PathLike) -> dict:
    path = run_file(workdir)
    if Path(workdir).exists() and not Path(workdir).is_dir():
        raise ValueError(f"{os.fspath(workdir)!r} is a file, not a run directory")
    if not Path(workdir).is_dir():
        raise ValueError(f"checkpoint directory {os.fspath(workdir)!r} does not exist")
    if not path.is_file():
        raise ValueError(f"{os.fspath(workdir)!r} is not a placeto-jax run (no run.json)")
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or doc.get("format") != RUN_FORMAT:
            raise ValueError(f"unsupported run.json format {doc.get('format')!r}")
        return doc
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"corrupt {path}: {err}") from None


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x


# ---------------------------------------------------------------------- one run at a time
@contextlib.contextmanager
def workdir_lock(workdir: str | os.PathLike) -> Iterator[None]:
    """Hold WORKDIR/train.lock for the block: created exclusively with this process's pid and
    host, removed on exit. A lock whose process no longer runs (same host) is stale and taken
    over; a live one refuses with a ValueError naming the pid. The directory is created first:
    a path that cannot be written fails here, before any work, naming the path."""
    directory = Path(workdir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OSError(f"cannot create the run directory {os.fspath(workdir)!r}: "
                      f"{err.strerror or err}") from None  # fmt: skip
    path = directory / "train.lock"
    mine = json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(), "started": started(os.getpid())}
    ).encode()
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            _refuse_or_clear(path)
            continue
        except OSError as err:
            raise OSError(f"cannot write to the run directory {os.fspath(workdir)!r}: "
                          f"{err.strerror or err}") from None  # fmt: skip
        with os.fdopen(fd, "wb") as f:
            f.write(mine)
        break
    else:
        raise ValueError(f"{path} keeps reappearing; another train is starting in {workdir}")
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if path.read_bytes() == mine:
                path.unlink()


def _refuse_or_clear(path: Path) -> None:
    """Refuse when the lock's process runs; remove a stale (or unreadable) lock."""
    try:
        holder = json.loads(path.read_bytes())
        pid, host = int(holder["pid"]), str(holder["host"])
    except (OSError, ValueError, KeyError, TypeError):
        pid, host, holder = -1, "", {}
    if host and host != socket.gethostname():
        raise ValueError(
            f"{path.parent} is in use by a train on host {host!r} (pid {pid}); wait for it to "
            f"finish, or remove {path} if that run is gone"
        )
    recorded = holder.get("started")
    reused = pid > 0 and recorded is not None and started(pid) not in (None, recorded)
    if pid > 0 and _alive(pid) and not reused:
        raise ValueError(
            f"{path.parent} is in use by another train (pid {pid}); wait for it to finish or "
            "use another --workdir"
        )
    gone = "now runs another program" if reused else "is gone"
    print(f"placeto-jax: note: removing the stale lock {path} (pid {pid} {gone})", file=sys.stderr)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def started(pid: int) -> str | None:
    """When process `pid` started (Linux: clock ticks since boot, from /proc), so that a lock
    can tell its process from a later one given the same pid; None where it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the command name, which may hold spaces
    return fields[19] if len(fields) > 19 else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    return True


# ---------------------------------------------------------------------- checkpoints
def tree_digest(tree: Any) -> str:
    """SHA-256 (hex) of a pytree's arrays: dtype, shape and bytes of every leaf, in order."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(jax.device_get(tree)):
        arr = np.ascontiguousarray(leaf)
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class Provenance:
    """What a checkpoint was made with, written into its integrity record."""

    config: str  # `config_digest`
    graphs: tuple[str, ...]  # `Graph.digest` of each graph of the run


class DamagedCheckpoint(ValueError):
    """A checkpoint step that orbax cannot restore or whose arrays fail their checksums."""


def _tree_bytes(tree: Any) -> int:
    return sum(
        int(np.prod(np.shape(x))) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree)
    )


@contextlib.contextmanager
def _quiet_orbax() -> Iterator[None]:
    """Hold back what orbax's threads print during the block (file descriptor 2 goes to a
    temporary file): replayed when the block succeeds, dropped when it fails, and absl and
    asyncio logging and thread tracebacks stay off after a failure. Orbax reports one failed
    write from every thread it started; the caller reports it once."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            for name in ("absl", "asyncio"):  # its threads' and futures' reports of the failure
                logging.getLogger(name).setLevel(logging.CRITICAL + 1)
            threading.excepthook = lambda args: None
            warnings.simplefilter("ignore", RuntimeWarning)  # its abandoned coroutines, at exit
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        held.seek(0)
        sys.stderr.write(held.read().decode(errors="replace"))


def _file_digests(step_dir: Path) -> dict[str, str]:
    """SHA-256 of every file under a step's folder, by path relative to it."""
    return {
        path.relative_to(step_dir).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(step_dir.rglob("*"))
        if path.is_file() and path.name != INTEGRITY
    }


def _changed_files(step_dir: Path, recorded: object, item: str) -> str | None:
    """The first file of `item` (or of the step itself) that is missing, new or changed since
    the save, or None; every file counts as changed when nothing was recorded."""
    if not isinstance(recorded, dict):
        return INTEGRITY

    def mine(name: str) -> bool:  # the item's files and the step's own, not the other item's
        first = name.split("/", 1)[0]
        return "/" not in name or first == item

    now = {k: v for k, v in _file_digests(step_dir).items() if mine(k)}
    want = {k: v for k, v in recorded.items() if mine(k)}
    return next((k for k in sorted(set(now) | set(want)) if now.get(k) != want.get(k)), None)


class Checkpointer:
    """Orbax checkpoints under WORKDIR/checkpoints (the two latest are kept), each with an
    integrity record (see the module docstring)."""

    def __init__(self, workdir: str | os.PathLike, create: bool = True):
        directory = Path(workdir).absolute() / "checkpoints"
        if not create and not directory.is_dir():
            raise ValueError(f"no checkpoints in {os.fspath(workdir)!r}")
        self.directory = directory
        self._create = create
        self._manager = self._open()

    def _open(self) -> ocp.CheckpointManager:
        return ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=2, create=self._create, enable_async_checkpointing=False
            ),
        )

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def check_room(self, state: Any, step: int | None = None) -> None:
        """OSError naming the folder when a checkpoint of `state` clearly cannot be written:
        too little free space, or a file-size limit (`ulimit -f`) below its state's size (orbax
        writes an item's arrays to one data file; a write it starts and cannot finish leaves
        its threads printing tracebacks after the error)."""
        what = "checkpoints" if step is None else f"checkpoint {step}"
        need = 2 * _tree_bytes(state) + (1 << 20)  # state + params, and metadata
        free = shutil.disk_usage(self.directory).free
        if free < need:
            raise OSError(
                f"cannot save {what} in {self.directory}: {free / 1e6:.1f} MB free, "
                f"about {need / 1e6:.1f} MB needed"
            )
        limit, size = resource.getrlimit(resource.RLIMIT_FSIZE)[0], _tree_bytes(state)
        if limit != resource.RLIM_INFINITY and limit < size:
            raise OSError(
                f"cannot save {what} in {self.directory}: files may not grow past {limit:,} "
                f"bytes (ulimit -f), and a checkpoint's data file takes about {size:,} bytes"
            )

    def save(self, step: int, state: Any, provenance: Provenance) -> None:
        """Save `state` at `step` and then its integrity record. OSError names the folder: when
        it clearly cannot be written (`check_room`, before writing anything), or when orbax
        fails (its own logging and worker-thread tracebacks are silenced: the OSError is the
        report)."""
        self.check_room(state, step)
        try:
            with _quiet_orbax():
                self._save(step, state, provenance)
        except Exception as err:  # orbax wraps I/O failures in many types
            text = " ".join(str(err).split())
            text = text if len(text) <= 300 else f"{text[:150]} ... {text[-150:]}"
            raise OSError(
                f"cannot save checkpoint {step} in {self.directory}: {type(err).__name__}: {text}"
            ) from None

    def _save(self, step: int, state: Any, provenance: Provenance) -> None:
        self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), params=ocp.args.StandardSave(state.params)
            ),
        )
        self._manager.wait_until_finished()
        record = {
            "step": step,
            "state": tree_digest(state),
            "params": tree_digest(state.params),
            "config": provenance.config,
            "graphs": list(provenance.graphs),
            "files": _file_digests(self.directory / str(step)),
        }
        with atomic_write(self.directory / str(step) / INTEGRITY) as f:
            f.write(json.dumps(record, indent=1).encode())

    def restore_state(self, template: Any, provenance: Provenance) -> Any | None:
        """The newest intact TrainState (shaped like `template`), or None when there is no
        checkpoint. A step is intact when both its state and its params are; damaged newer
        steps are moved to WORKDIR/damaged-checkpoints/ (STEP, or STEP.K when STEP was damaged
        before: no copy is deleted), so that the run can save those steps again, with a note on
        stderr; ValueError when every step is damaged."""
        steps = sorted(self._manager.all_steps(), reverse=True)
        problems = []
        for step in steps:
            try:  # both items: a step whose policy is damaged cannot be placed from
                state = self._restore_checked(step, "state", template, provenance)
                self._restore_checked(step, "params", template.params, provenance)
            except DamagedCheckpoint as err:
                problems.append(str(err))
                continue
            if problems:
                self._set_aside([s for s in steps if s > step])
            for problem in problems:
                print(
                    f"placeto-jax: note: {problem}; resuming from step {step} (the damaged step "
                    f"is kept in {self.directory.parent / 'damaged-checkpoints'})",
                    file=sys.stderr,
                )
            return state
        if problems:
            raise ValueError(
                f"every checkpoint in {self.directory} is damaged ({'; '.join(problems)}); "
                "train in a new --workdir"
            )
        return None

    def _set_aside(self, steps: list[int]) -> None:
        """Move damaged `steps` out of the checkpoint folder and reopen the manager."""
        self._manager.close()
        aside = self.directory.parent / "damaged-checkpoints"
        aside.mkdir(exist_ok=True)
        for step in steps:
            target, copy = aside / str(step), 1
            while target.exists():  # a step damaged again: keep the earlier copy too
                target, copy = aside / f"{step}.{copy}", copy + 1
            (self.directory / str(step)).rename(target)
        self._manager = self._open()

    def restore_params(self, template: Any) -> Any:
        """The policy of the newest step; DamagedCheckpoint when that step is damaged."""
        step = self.latest_step()
        if step is None:
            raise ValueError("the run has no checkpoint yet")
        return self._restore_checked(step, "params", template, None)

    def _restore_checked(
        self, step: int, item: str, template: Any, provenance: Provenance | None
    ) -> Any:
        where = f"checkpoint step {step} in {self.directory}"
        try:
            record = json.loads((self.directory / str(step) / INTEGRITY).read_bytes())
            expected = str(record[item])
        except (OSError, ValueError, KeyError, TypeError):
            raise DamagedCheckpoint(
                f"{where} is damaged: its {INTEGRITY} is missing or unreadable"
            ) from None
        if provenance is not None and record.get("config") != provenance.config:
            raise ValueError(f"{where} was made with another config; use a new --workdir")
        changed = _changed_files(self.directory / str(step), record.get("files"), item)
        if changed:
            raise DamagedCheckpoint(f"{where} is damaged: {changed} differs from its checksum")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(**{item: ocp.args.StandardRestore(abstract)})
            )[item]
        except Exception as err:  # orbax raises many types for damaged files
            raise DamagedCheckpoint(
                f"{where} is damaged: orbax cannot restore {item!r} ({type(err).__name__})"
            ) from None
        if tree_digest(restored) != expected:
            raise DamagedCheckpoint(f"{where} is damaged: {item!r} fails its checksum")
        return restored

    def close(self) -> None:
        self._manager.close()
