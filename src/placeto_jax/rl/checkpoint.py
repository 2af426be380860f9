"""A run directory: its resolved config (`run.json`) and orbax checkpoints of the train state.

Layout of WORKDIR:
  run.json            format version, resolved config, graph names (written atomically)
  checkpoints/STEP/   orbax: `state` (the whole TrainState) and `params` (policy only)
  metrics.jsonl       one JSON object per update (see rl/loop.py)
  tb/                 TensorBoard event files

A policy is rebuilt from WORKDIR alone: `load_run` gives the config, `restore_params` the weights.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from placeto_jax.config import Config, from_dict, to_dict
from placeto_jax.files import atomic_write

RUN_FORMAT = 1


def run_file(workdir: str | os.PathLike) -> Path:
    return Path(workdir) / "run.json"


def write_run(workdir: str | os.PathLike, config: Config, graph_names: list[str]) -> None:
    """Write run.json, or check that an existing one describes the same run (resuming)."""
    path = run_file(workdir)
    doc = {"format": RUN_FORMAT, "config": to_dict(config), "graphs": list(graph_names)}
    if path.exists():
        old_config, old_graphs = load_run(workdir)
        if to_dict(old_config) != doc["config"] or old_graphs != doc["graphs"]:
            raise ValueError(
                f"{workdir} holds a run with a different config or graphs; "
                "resume it with the same arguments or use a new --workdir"
            )
        return
    Path(workdir).mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as f:
        f.write(json.dumps(_jsonable(doc), indent=2).encode())


def load_run(workdir: str | os.PathLike) -> tuple[Config, list[str]]:
    """(config, graph names) of a run directory; ValueError if it is missing or unreadable."""
    path = run_file(workdir)
    if not Path(workdir).is_dir():
        raise ValueError(f"checkpoint directory {os.fspath(workdir)!r} does not exist")
    if not path.is_file():
        raise ValueError(f"{os.fspath(workdir)!r} is not a placeto-jax run (no run.json)")
    try:
        doc = json.loads(path.read_text())
        if doc.get("format") != RUN_FORMAT:
            raise ValueError(f"unsupported run.json format {doc.get('format')!r}")
        return from_dict(doc["config"]), list(doc["graphs"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"corrupt {path}: {err}") from None


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x


class Checkpointer:
    """Orbax checkpoints under WORKDIR/checkpoints (the two latest are kept)."""

    def __init__(self, workdir: str | os.PathLike, create: bool = True):
        directory = Path(workdir).absolute() / "checkpoints"
        if not create and not directory.is_dir():
            raise ValueError(f"no checkpoints in {os.fspath(workdir)!r}")
        self._manager = ocp.CheckpointManager(
            directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=2, create=create),
        )

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, state: Any) -> None:
        self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), params=ocp.args.StandardSave(state.params)
            ),
        )
        self._manager.wait_until_finished()

    def restore_state(self, template: Any) -> Any | None:
        """The latest TrainState (shaped like `template`), or None when there is none."""
        step = self.latest_step()
        if step is None:
            return None
        return self._restore(step, "state", template)

    def restore_params(self, template: Any) -> Any:
        step = self.latest_step()
        if step is None:
            raise ValueError("the run has no checkpoint yet")
        return self._restore(step, "params", template)

    def _restore(self, step: int, item: str, template: Any) -> Any:
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(**{item: ocp.args.StandardRestore(abstract)})
            )
        except Exception as err:  # orbax raises many types for damaged files
            raise ValueError(
                f"cannot restore checkpoint {step} from {self._manager.directory}: "
                f"{type(err).__name__}: {str(err)[:300]}"
            ) from None
        return restored[item]

    def close(self) -> None:
        self._manager.close()
