"""The host loop around jitted chunks of updates (one `lax.scan` from one evaluation or
checkpoint to the next): restore-or-initialise, greedy evaluation, metrics (JSONL and
TensorBoard), a progress bar, and checkpoints.

Every update derives its randomness from (run key, update index), and the whole TrainState
(parameters, optimizer, baseline windows) is checkpointed, so a killed run that is started again
with the same arguments resumes from its last checkpoint and ends in exactly the state of an
uninterrupted run. Metrics logged after that checkpoint by the killed run are dropped first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh
from tqdm.auto import tqdm

from placeto_jax.cluster import CUSTOM, Cluster
from placeto_jax.config import Config, RunConfig
from placeto_jax.env.bank import Bank, PlacementGraph, build_bank, prepare
from placeto_jax.files import atomic_write
from placeto_jax.graphs.registry import load
from placeto_jax.rl.checkpoint import (
    Checkpointer,
    Provenance,
    config_digest,
    workdir_lock,
    write_run,
)
from placeto_jax.rl.sharding import local_copy
from placeto_jax.rl.train import Trainer, TrainState, keep_run, make_train
from placeto_jax.sim.api import simulate, single_device


@dataclasses.dataclass(frozen=True)
class TrainResult:
    state: TrainState
    trainer: Trainer
    bank: Bank
    evaluation: dict[str, np.ndarray]  # Trainer.greedy of the final parameters, per graph
    resumed_from: int  # update index the run started from (0: fresh)


def cluster_of(config: Config) -> Cluster:
    """The preset `config` names (a run on a custom cluster keeps it in its run directory:
    `checkpoint.load_cluster`)."""
    if config.cluster_preset == CUSTOM:
        raise ValueError("the config names a custom cluster: pass the Cluster itself")
    return Cluster.preset(config.cluster_preset, config.n_devices)


def load_graphs(spec: str, config: Config, cluster: Cluster | None = None) -> list[PlacementGraph]:
    """The graphs named by a comma-separated spec, coarsened for the agent as `config` says
    (on `cluster`, default `config`'s preset)."""
    overhead = (cluster or cluster_of(config)).delta1
    out = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            raise ValueError(f"empty graph name in {spec!r}")
        loaded = load(item)
        pairs = loaded if isinstance(loaded, list) else [(item, loaded)]
        for name, graph in pairs:
            graph.check_has_compute(name)
        out.extend(prepare(name, graph, config.run.group_target, overhead) for name, graph in pairs)
    return out


class TrainingInterrupted(Exception):
    """Ctrl-C during `train_and_evaluate`: the state at `step` was checkpointed in `workdir`."""

    def __init__(self, workdir: str | os.PathLike, step: int):
        self.workdir, self.step = workdir, step
        super().__init__(
            f"interrupted: checkpoint of update {step} saved in {os.fspath(workdir)}; run the "
            "same command to resume from it"
        )


def train_and_evaluate(
    config: Config,
    graphs: list[PlacementGraph],
    workdir: str | os.PathLike,
    *,
    progress: bool = True,
    stop_at: int | None = None,
    on_eval: Callable[[int, dict[str, float]], None] | None = None,
    mesh: Mesh | None = None,
    cluster: Cluster | None = None,
) -> TrainResult:
    """Train on `graphs` for `cluster` (default: `config`'s preset) in `workdir`, resuming from
    its newest intact checkpoint if there is one. The directory is locked for the run
    (`checkpoint.workdir_lock`), and run.json must describe the same config, graph contents and
    cluster. `stop_at` ends the call after that many
    updates in total without a final checkpoint (a time box, and how tests stand in for a
    killed run). Ctrl-C saves a checkpoint at the end of the current chunk of updates and
    raises `TrainingInterrupted`. `mesh` (`sharding.episode_mesh()`) splits the episodes over
    its devices, across processes too; only process 0 locks, writes and logs."""
    cluster = cluster or cluster_of(config)
    bank = build_bank(graphs, config.run.buckets)
    run = make_train(config, bank, cluster, mesh)
    if mesh is None:
        keep_run(run, bank, cluster)  # placing its graphs next reuses its programs
    lead = jax.process_index() == 0
    provenance = Provenance(config_digest(config), tuple(graph_digests(graphs)))
    with workdir_lock(workdir) if lead else contextlib.nullcontext():
        if lead:
            write_run(workdir, config, list(bank.names), provenance.graphs, cluster)
        with _interrupt_flag() as interrupted:
            return _train(config, run, bank, cluster, workdir, provenance, progress, stop_at,
                          on_eval, interrupted, lead)  # fmt: skip


def graph_digests(graphs: list[PlacementGraph]) -> list[str]:
    """The content digest of every graph as the user gave it (the op graph when coarsened)."""
    return [(pg.op_graph or pg.graph).digest for pg in graphs]


@contextlib.contextmanager
def _interrupt_flag():
    """A one-element list that turns True on the first Ctrl-C (the second one interrupts at
    once); a no-op outside the main thread, where signal handlers cannot be installed."""
    flag = [False]
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame):
        if flag[0]:
            raise KeyboardInterrupt
        flag[0] = True
        print("\nplaceto-jax: saving a checkpoint at the next update boundary (Ctrl-C again to "
              "stop at once)", file=sys.stderr)  # fmt: skip

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def _train(
    config, run, bank, cluster, workdir, provenance, progress, stop_at, on_eval, interrupted, lead
) -> TrainResult:
    env_params = run.env_params
    checkpointer = Checkpointer(workdir)
    fresh = run.init(jax.random.key(config.seed), env_params)
    state = checkpointer.restore_state(fresh, provenance) or fresh
    checkpointer.check_room(state)  # before any update, not at the first save
    start = int(local_copy(state.iteration))
    skipped_before = int(local_copy(state.skipped))
    log = MetricsLog(workdir, start) if lead else None
    single = single_makespans(bank, cluster)
    total = config.train.iterations
    end = total if stop_at is None else min(stop_at, total)
    try:
        with tqdm(
            total=total,
            initial=start,
            disable=not progress,
            desc="train",
            unit="update",
            dynamic_ncols=True,
        ) as bar:
            for first, last in chunks(start, end, config.run):
                state, stacked = run.updates(state, run.hyper, env_params, count=last - first + 1)
                stacked = local_copy(stacked)
                for iteration in range(first, last + 1):
                    record = {k: float(v[iteration - first]) for k, v in stacked.items()}
                    if iteration == last and (last % config.run.eval_every == 0 or last == total):
                        summary = _eval_record(
                            run.greedy(state.params, env_params), bank, cluster, single
                        )
                        record.update(summary)
                        bar.set_postfix(progress_units(
                            config, record["train/final_runtime"], summary["eval/best_runtime"]
                        ))  # fmt: skip
                        if on_eval is not None:
                            on_eval(iteration, summary)
                    if log is not None:
                        log.write(iteration, record)
                if last % config.run.checkpoint_every == 0 or last == total or interrupted[0]:
                    checkpointer.save(last, state, provenance)
                bar.update(last - first + 1)
                if interrupted[0]:
                    raise TrainingInterrupted(workdir, last)
        if total == 0 and lead and checkpointer.latest_step() is None:
            checkpointer.save(0, state, provenance)  # the untrained policy, as a checkpoint
    finally:
        if log is not None:  # a failed run's curve is not drawn: its error is the report
            log.close(draw=sys.exc_info()[0] in (None, TrainingInterrupted))
        checkpointer.close()
    check_learned(int(local_copy(state.iteration)) - start,
                  int(local_copy(state.skipped)) - skipped_before)  # fmt: skip
    evaluation = local_copy(run.greedy(state.params, env_params))
    return TrainResult(state, run.trainer, bank, evaluation, start)


def check_learned(updates: int, skipped: int) -> None:
    """ValueError when every one of this call's `updates` was `skipped` (a non-finite loss or
    gradient: nothing was learned); a note on stderr when some were."""
    if updates and skipped == updates:
        raise ValueError(
            f"all {updates} updates were skipped (the loss or gradient was not finite, as with "
            "op costs too small or too large to normalise): nothing was learned"
        )
    if skipped:
        print(
            f"placeto-jax: note: {skipped} of {updates} updates were skipped (the loss or "
            "gradient was not finite); see train/skipped_updates in metrics.jsonl",
            file=sys.stderr,
        )


def progress_units(config: Config, episode: float, greedy: float) -> dict[str, str]:
    """The progress bar's runtimes with their unit: the episodes' final runtime and the greedy
    evaluation's best, as fractions of the episode's start (the env's `initial` runtimes) or
    in seconds."""
    if config.env.normalize == "initial":
        return {"episode": f"{episode:.3f} of start", "greedy": f"{greedy:.3f} of start"}
    return {"episode": f"{episode:.4g} s", "greedy": f"{greedy:.4g} s"}


def chunks(start: int, end: int, run: RunConfig) -> list[tuple[int, int]]:
    """Update ranges (first, last), inclusive, covering start+1..end, each run as one jitted scan:
    a chunk ends at every evaluation and checkpoint step and at `end`. The boundaries depend only
    on the iteration numbers, so a resumed run takes the same chunks as an uninterrupted one."""
    ranges, first = [], start + 1
    for iteration in range(start + 1, end + 1):
        if (
            iteration % run.eval_every == 0
            or iteration % run.checkpoint_every == 0
            or iteration == end
        ):
            ranges.append((first, iteration))
            first = iteration + 1
    return ranges


def single_makespans(bank: Bank, cluster: Cluster) -> np.ndarray:
    """[G] float64 µs: each graph's single-device makespan, simulated on its op graph."""
    ops = [pg.op_graph or pg.graph for pg in bank.graphs]
    return np.array([float(simulate(g, cluster, single_device(g, cluster)).makespan) for g in ops])


def _eval_record(
    out: dict[str, jax.Array], bank: Bank, cluster: Cluster, single: np.ndarray
) -> dict[str, float]:
    """The greedy evaluation's scalars (docs/agent.md): runtimes in the env's units, and the
    best placement's makespan over the single-device one, simulated on the op graph."""
    out = local_copy(out)
    best = np.array([
        float(simulate(pg.op_graph or pg.graph, cluster, pg.expand(p[: pg.graph.n_ops])).makespan)
        for pg, p in zip(bank.graphs, out["best_placement"], strict=True)
    ])  # fmt: skip
    vs_single = best / single
    record = {
        "eval/initial_runtime": float(np.mean(out["initial_runtime"])),
        "eval/best_runtime": float(np.mean(out["best_runtime"])),
        "eval/final_runtime": float(np.mean(out["final_runtime"])),
        "eval/best_vs_single": float(np.mean(vs_single)),
    }
    for i, name in enumerate(bank.names):
        record[f"eval/{name}/best_runtime"] = float(out["best_runtime"][i])
        record[f"eval/{name}/best_vs_single"] = float(vs_single[i])
    return record


class MetricsLog:
    """metrics.jsonl (one object per update, with "iteration") and TensorBoard scalars. Records
    after `start` (left by a killed run) are dropped when it opens."""

    def __init__(self, workdir: str | os.PathLike, start: int):
        self.path = Path(workdir) / "metrics.jsonl"
        kept = [r for r in self._records() if r.get("iteration", 0) <= start]
        with atomic_write(self.path) as f:
            f.write("".join(json.dumps(r) + "\n" for r in kept).encode())
        self._file = self.path.open("a")
        self._tb = _summary_writer(Path(workdir) / "tb", purge_step=start + 1)

    def _records(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        records = []
        for line in self.path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut off when the run was killed, and everything after it
        return records

    def write(self, iteration: int, record: dict[str, float]) -> None:
        self._file.write(json.dumps({"iteration": iteration, **record}) + "\n")
        self._file.flush()
        for key, value in record.items():
            self._tb.add_scalar(key, value, iteration)

    def close(self, draw: bool) -> None:
        """Close the files and, with `draw`, draw the learning curve beside them
        (learning_curve.png)."""
        from placeto_jax.plotting import plot_training  # matplotlib, only when a run logs

        self._file.close()
        self._tb.close()
        if draw:
            plot_training(self._records(), self.path.with_name("learning_curve.png"))


def _summary_writer(directory: Path, purge_step: int):
    from tensorboardX import SummaryWriter  # imports protobuf; only when a run logs

    return SummaryWriter(str(directory), purge_step=purge_step)


def read_metrics(workdir: str | os.PathLike) -> list[dict[str, Any]]:
    path = Path(workdir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
