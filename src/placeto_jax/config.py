"""Configuration of a Placeto run: frozen dataclasses, presets and `key=value` overrides.

A run is reproducible from its `Config` and seed; the resolved config is saved next to every
checkpoint (`to_dict`/`from_dict`), so a policy can be rebuilt from its checkpoint alone.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal

from placeto_jax.cluster import MAX_DEVICES

Traversal = Literal["topological", "random"]
InitialPlacement = Literal["random", "fixed", "single", "given"]
Normalize = Literal["none", "initial"]
RewardGraph = Literal["grouped", "ops"]
MessagePassing = Literal["radial", "sweep", "none"]
Baseline = Literal["per-step", "none"]
Agent = Literal["paper", "construct"]
ConstructHint = Literal["none", "best"]
TeacherKind = Literal["best", "searched", "descent", "lookahead"]


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """The MDP (docs/agent.md, ../shared/spec/placeto.md "MDP")."""

    passes: int = 1  # visits of every node per episode
    traversal: Traversal = "topological"
    initial_placement: InitialPlacement = "random"  # per episode; "fixed": one per graph;
    #                                     "given": each graph's own start (improve mode)
    fixed_placement_seed: int = 0  # seed of the "fixed" initial placements
    normalize: Normalize = "initial"  # runtimes divided by the episode's initial one; "none": s
    memory_penalty: float = 2.0  # runtime seconds added per GB over a device's memory
    memory_penalty_cap: float = 10.0  # seconds, the most the penalty adds
    memory_feature: bool = False  # add (param + output bytes) / max as a node feature
    mask_out_of_memory: bool = False  # forbid devices whose memory the node would overflow
    construct_hint: ConstructHint = "none"  # construct agent: "best": each op observes the
    #   device the best of its teachers gives it (a declared start, counted in evaluations)
    construct_reserve: bool = True  # with a hint, each device keeps room for the parameters
    #   the hint puts on it later (False: a policy trained on the graph it places, whose
    #   teacher may repack memory the hint filled)
    construct_lookahead: bool = False  # with a hint: each device also observes the exact
    #   makespan of the hint completing the episode with the op there (D - 1 simulations a
    #   decision, counted as evaluations)
    reward_graph: RewardGraph = "grouped"  # "ops": simulate the op graph, placement expanded


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    """The graph-embedding policy (../shared/spec/placeto.md "Graph embedding and policy")."""

    message_passing: MessagePassing = "radial"
    rounds: int = 8  # radial rounds (ignored by "sweep" and "none")
    width: int = 0  # node embedding width; 0: the feature count d = 5 + D (+1); construct: 64
    head_widths: tuple[int, ...] = ()  # hidden layers of the head; (): (16 d, 8 d)
    per_device_parallel: bool = False  # pool the parallel nodes per device


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """REINFORCE over a batch of parallel episodes (../shared/spec/placeto.md "Training")."""

    iterations: int = 200  # policy-gradient updates (0: the initial weights are the checkpoint)
    imitation: int = 0  # construct agent: updates imitating the best heuristic's placements first
    teacher: TeacherKind = "best"  # construct agent: what it imitates; "searched": the best
    #   heuristic improved by local search with random proposals (`stages.teachers`);
    #   "descent": steepest descent over segment moves from that and from the best heuristic,
    #   the better kept (`placers.segments`: for training on one graph of up to ~1,000 ops);
    #   "lookahead": the episode that takes the lookahead's best device at every step
    teacher_passes: int = 1  # construct agent, teacher "searched" or "descent": random passes
    temperature: float = 1.0  # construct agent: of the episodes sampled by the `iterations`
    #   self-imitation updates (each graph's best placement so far imitated)
    episodes: int = 64  # parallel episodes per update, spread evenly over its graphs
    graphs_per_update: int = 0  # graphs an update trains on (round-robin); 0: all of them
    learning_rate: float = 1e-3
    final_learning_rate: float = 1e-4  # linear decay over `iterations`
    grad_clip: float = 1.25  # global norm
    entropy: float = 1e-2  # entropy weight at the start
    final_entropy: float = 0.0  # reached linearly at `entropy_decay_fraction` of the run
    entropy_decay_fraction: float = 0.5
    baseline: Baseline = "per-step"
    baseline_window: int = 10  # episodes per graph in the per-step baseline
    normalize_advantage: bool = False  # divide advantages by their batch standard deviation
    grad_chunk: int = 0  # steps per gradient chunk (memory bound); 0: automatic


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The host loop: evaluation, logging and checkpoints."""

    eval_every: int = 20  # iterations between greedy evaluations (and log lines); construct
    #                        agent: 0 for none (with the lookahead, one costs N (D - 1) simulations)
    checkpoint_every: int = 50  # iterations between checkpoints (and at the end)
    buckets: tuple[int, ...] = (
        32,
        64,
        96,
        128,
        192,
        256,
        384,
        512,
        768,
        1024,
        1536,
        2048,
        3072,
        4096,
    )
    group_target: int = 0  # coarsen graphs to at most this many nodes first; 0: no coarsening


@dataclasses.dataclass(frozen=True)
class Config:
    agent: Agent = "paper"  # "paper": Placeto's MDP and policy; "construct": each op placed once,
    #                         observing a list schedule (docs/agent.md, "The construct agent")
    n_devices: int = 4
    cluster_preset: str = "placeto-k80"
    seed: int = 0
    env: EnvConfig = EnvConfig()
    policy: PolicyConfig = PolicyConfig()
    train: TrainConfig = TrainConfig()
    run: RunConfig = RunConfig()

    def __post_init__(self) -> None:
        validate(self)


PRESETS: dict[str, dict[str, Any]] = {
    # CPU-sized: small graphs, few rounds, a batch that a 2-core CPU steps through quickly.
    "tiny": {
        "train.normalize_advantage": True,
        "policy.rounds": 3,
        "train.iterations": 60,
        "train.episodes": 48,
        # lr 3e-2: best of the quick sweep (family:nmt/0) and better than 1e-2 on make run's
        # test graphs (docs/agent.md)
        "train.learning_rate": 3e-2,
        "train.final_learning_rate": 3e-3,
        "train.entropy": 3e-2,
        "run.eval_every": 10,
        "run.checkpoint_every": 20,
        "run.group_target": 48,
    },
    # The construct agent, CPU-sized: imitation of the best heuristic on each training graph
    # (op level, no coarsening), then policy-gradient updates (docs/agent.md).
    "construct": {
        "agent": "construct",
        "policy.rounds": 3,
        "train.imitation": 300,
        "train.iterations": 0,
        "train.episodes": 8,
        "train.graphs_per_update": 2,
        "train.learning_rate": 1e-3,
        "train.entropy": 1e-2,
        "train.temperature": 0.3,
        "run.eval_every": 50,
        "run.checkpoint_every": 100,
        "run.group_target": 0,
    },
    # The paper's settings (../shared/spec/placeto.md), for an accelerator.
    "paper": {
        "train.iterations": 2000,
        "train.episodes": 256,
        "run.eval_every": 50,
        "run.checkpoint_every": 100,
        "run.group_target": 0,
    },
}


# The construct agent observing the best heuristic's placement (a declared start) and imitating
# that placement improved by one local-search pass (findings.md, 2026-12-06).
PRESETS["construct-hinted"] = {
    **PRESETS["construct"], "env.construct_hint": "best", "train.teacher": "searched"
}  # fmt: skip
# The hinted agent observing, per device, the exact makespan of the hint completing its episode,
# and imitating the episode that takes the best of them at every step: 1,000 updates of 4 graphs
# (on nmt's train split, 300 of 2 left the greedy episode 1.06x its teacher there; findings.md).
# `make run`'s preset.
PRESETS["construct-lookahead"] = {
    **PRESETS["construct"],
    "env.construct_hint": "best",
    "env.construct_lookahead": True,
    "train.teacher": "lookahead",
    "train.imitation": 1000,
    "train.graphs_per_update": 4,
    "run.eval_every": 0,  # none: a greedy episode on every training graph costs 6 minutes on nmt
    "run.checkpoint_every": 250,
}


Source = Literal["policy", "heuristics"]
Proposer = Literal["policy", "ranked", "random"]
EVERY_OTHER_DEVICE = -1  # `Pipeline.search_ops`: one pass per other device (D - 1)


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """How `placeto_jax.place` chains its stages (docs/architecture.md, "The place pipeline"):
    a first placement (the policy's episodes, or the best fast heuristic), then optional search
    stages on the op graph, each counted in evaluations and wall time. Not part of a run's
    `Config`: one policy can be placed with any pipeline."""

    source: Source = "policy"  # first placement: the policy's episodes, or the best heuristic
    start: str = ""  # episodes start from a `stages.starts.STARTS` name or a placement
    #                  file ("": the run's own, random unless it trained from given starts)
    samples: int = 0  # sampled episodes per graph besides the greedy one
    temperature: float = 1.0  # of the sampled episodes: logits divided by it
    group_targets: tuple[int, ...] = ()  # coarsenings played, the best kept (): the run's own
    search_groups: int = 0  # passes of policy-guided search over the policy's groups
    search_ops: int = 0  # passes of policy-guided search over the op graph (-1: D - 1)
    proposer: Proposer = "policy"  # the op-level search's moves (random: every stage's)
    random_passes: int = 0  # passes of uniformly random proposals after the op-level search
    second_start: bool = False  # the op-level search also from the fastest other heuristic
    squeeze: bool = False  # the memory squeeze last, where the placement overflows

    def __post_init__(self) -> None:
        validate_pipeline(self)

    @property
    def uses_policy(self) -> bool:
        """Whether a stage needs a trained policy."""
        searches = (self.search_groups, self.search_ops, self.random_passes)
        return self.source == "policy" or any(searches)


def validate_pipeline(pipeline: Pipeline) -> None:
    """ValueError naming the first bad field of `pipeline`."""
    hints = _hints(Pipeline)
    for f in dataclasses.fields(Pipeline):
        value = getattr(pipeline, f.name)
        if not _has_type(value, hints[f.name]):
            raise ValueError(f"pipeline.{f.name}={value!r} must be {_type_name(hints[f.name])}")
        allowed = typing.get_args(hints[f.name])
        if typing.get_origin(hints[f.name]) is Literal and value not in allowed:
            raise ValueError(
                f"pipeline.{f.name}={value!r} is not one of {', '.join(map(str, allowed))}"
            )
    p = pipeline
    checks = [
        ("samples", 0 <= p.samples <= MAX_SAMPLES, f"must be in [0, {MAX_SAMPLES}]"),
        ("temperature", p.temperature > 0, "must be > 0"),
        ("group_targets", all(t >= 0 for t in p.group_targets), "must be >= 0"),
        ("search_groups", 0 <= p.search_groups <= MAX_PASSES, f"must be in [0, {MAX_PASSES}]"),
        ("search_ops", EVERY_OTHER_DEVICE <= p.search_ops <= MAX_PASSES,
         f"must be in [0, {MAX_PASSES}], or -1 (one pass per other device)"),
        ("random_passes", 0 <= p.random_passes <= MAX_PASSES, f"must be in [0, {MAX_PASSES}]"),
    ]  # fmt: skip
    for name, ok, why in checks:
        if not ok:
            raise ValueError(f"pipeline.{name} {why}")
    needs = [("samples", p.samples), ("temperature", p.temperature != 1.0),
             ("group_targets", p.group_targets),
             ("start", p.start), ("search_groups", p.search_groups)]  # fmt: skip
    if p.source == "heuristics" and any(value for _, value in needs):
        used = next(name for name, value in needs if value)
        raise ValueError(f"pipeline.{used} sets the policy's episodes: not with source=heuristics")
    if p.temperature != 1.0 and not p.samples:
        raise ValueError("pipeline.temperature sets the sampled episodes: set samples too")


MAX_SAMPLES = 4096  # sampled episodes per graph
MAX_PASSES = 64  # passes of an episode or a search stage


MAX_ITERATIONS = 10_000_000  # policy updates of one run
MAX_EPISODES = 65_536  # parallel episodes per update (memory grows with them)


def validate(config: Config) -> None:
    """ValueError naming the first bad field: a value of the wrong type (a boolean for a
    number, say), a non-finite number, or one out of its range."""
    _check_types(config)
    checks = [
        ("n_devices", config.n_devices <= MAX_DEVICES, f"must be <= {MAX_DEVICES}"),
        ("seed", 0 <= config.seed < 2**63, "must be in [0, 2^63)"),
        (
            "train.iterations",
            config.train.iterations <= MAX_ITERATIONS,
            f"must be <= {MAX_ITERATIONS:,}",
        ),
        ("train.episodes", config.train.episodes <= MAX_EPISODES, f"must be <= {MAX_EPISODES:,}"),
        ("env.memory_penalty", config.env.memory_penalty <= 1e6, "must be <= 1e6 s per GB"),
        ("env.memory_penalty_cap", config.env.memory_penalty_cap <= 1e6, "must be <= 1e6 s"),
        ("policy.head_widths", all(w >= 1 for w in config.policy.head_widths), "must be >= 1"),
        ("policy.width", config.policy.width <= 4096, "must be <= 4096"),
        ("policy.rounds", config.policy.rounds <= 1024, "must be <= 1024"),
        ("train.learning_rate", config.train.learning_rate <= 1, "must be <= 1"),
        ("train.final_learning_rate", config.train.final_learning_rate <= 1, "must be <= 1"),
        ("train.entropy", config.train.entropy >= 0, "must be >= 0"),
        ("train.temperature", config.train.temperature > 0, "must be > 0"),
        ("train.final_entropy", config.train.final_entropy >= 0, "must be >= 0"),
        ("n_devices", config.n_devices >= 1, "must be >= 1"),
        ("env.passes", config.env.passes >= 1, "must be >= 1"),
        ("env.memory_penalty", config.env.memory_penalty >= 0, "must be >= 0"),
        ("env.memory_penalty_cap", config.env.memory_penalty_cap >= 0, "must be >= 0"),
        ("policy.rounds", config.policy.rounds >= 1, "must be >= 1"),
        ("policy.width", config.policy.width >= 0, "must be >= 0"),
        ("train.iterations", config.train.iterations >= 0, "must be >= 0"),
        (
            "train.imitation",
            0 <= config.train.imitation <= MAX_ITERATIONS,
            f"must be in [0, {MAX_ITERATIONS:,}]",
        ),
        (
            "train.imitation",
            config.agent == "construct" or config.train.imitation == 0,
            "is for agent=construct (the paper agent has no imitation phase)",
        ),
        (
            "train.teacher",
            config.agent == "construct" or config.train.teacher == "best",
            "is for agent=construct (the paper agent imitates nothing)",
        ),
        (
            "env.construct_lookahead",
            not config.env.construct_lookahead or config.env.construct_hint == "best",
            "needs env.construct_hint=best (the hint completes each lookahead's placement)",
        ),
        (
            "train.teacher",
            config.train.teacher != "lookahead" or config.env.construct_lookahead,
            "lookahead needs env.construct_lookahead=true",
        ),
        (
            "env.construct_lookahead",
            not config.env.construct_lookahead or config.train.iterations == 0,
            "trains by imitation only (train.iterations=0): a sampled episode with it simulates "
            "N (D - 1) times",
        ),
        (
            "train.teacher_passes",
            1 <= config.train.teacher_passes <= MAX_ITERATIONS,
            f"must be in [1, {MAX_ITERATIONS:,}]",
        ),
        (
            "train.teacher_passes",
            config.train.teacher not in ("best", "lookahead") or config.train.teacher_passes == 1,
            "is for train.teacher=searched or descent (the best heuristic is not searched)",
        ),
        ("train.episodes", config.train.episodes >= 1, "must be >= 1"),
        ("train.graphs_per_update", config.train.graphs_per_update >= 0, "must be >= 0"),
        ("train.learning_rate", config.train.learning_rate > 0, "must be > 0"),
        ("train.final_learning_rate", config.train.final_learning_rate > 0, "must be > 0"),
        ("train.grad_clip", config.train.grad_clip > 0, "must be > 0"),
        ("train.baseline_window", config.train.baseline_window >= 1, "must be >= 1"),
        (
            "train.entropy_decay_fraction",
            0 < config.train.entropy_decay_fraction <= 1,
            "must be in (0, 1]",
        ),
        ("train.grad_chunk", config.train.grad_chunk >= 0, "must be >= 0"),
        (
            "run.eval_every",
            config.run.eval_every >= (0 if config.agent == "construct" else 1),
            "must be >= 1 (0: none, for agent=construct)",
        ),
        ("run.checkpoint_every", config.run.checkpoint_every >= 1, "must be >= 1"),
        ("run.buckets", len(config.run.buckets) > 0, "must not be empty"),
        (
            "run.buckets",
            all(b >= 8 and b % 8 == 0 for b in config.run.buckets),
            "must be multiples of 8",
        ),
        ("run.group_target", config.run.group_target >= 0, "must be >= 0"),
    ]
    for name, ok, why in checks:
        if not ok:
            raise ValueError(f"config {name} {why}")
    if config.agent not in typing.get_args(Agent):
        raise ValueError(
            f"config agent={config.agent!r} is not one of {', '.join(typing.get_args(Agent))}"
        )
    for section, cls in (("env", EnvConfig), ("policy", PolicyConfig), ("train", TrainConfig)):
        for field in dataclasses.fields(cls):
            _check_literal(f"{section}.{field.name}", getattr(getattr(config, section), field.name))


def _check_types(config: Config) -> None:
    """ValueError naming a field whose value does not have its declared type (ints are not
    booleans; floats are finite numbers; tuples hold ints)."""
    hints = _hints(Config)
    fields = [
        (f.name, getattr(config, f.name), hints[f.name])
        for f in dataclasses.fields(Config)
        if f.name not in ("env", "policy", "train", "run")
    ]
    for section in ("env", "policy", "train", "run"):
        owner, values = _owner(section + "."), getattr(config, section)
        hints = _hints(owner)
        fields += [
            (f"{section}.{f.name}", getattr(values, f.name), hints[f.name])
            for f in dataclasses.fields(owner)
        ]
    for name, value, hint in fields:
        if not _has_type(value, hint):
            raise ValueError(f"config {name}={value!r} must be {_type_name(hint)}")


def _has_type(value: Any, hint: Any) -> bool:
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return number and math.isfinite(value)
    if hint is str or typing.get_origin(hint) is Literal:
        return isinstance(value, str)
    if typing.get_origin(hint) is tuple:
        return isinstance(value, tuple) and all(_has_type(x, int) for x in value)
    return True


def _type_name(hint: Any) -> str:
    names = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}
    if typing.get_origin(hint) is tuple:
        return "a list of integers"
    return names.get(hint, "a string")


def _check_literal(name: str, value: Any) -> None:
    hint = _hints(_owner(name))[name.split(".")[1]]
    if typing.get_origin(hint) is Literal and value not in typing.get_args(hint):
        raise ValueError(
            f"config {name}={value!r} is not one of {', '.join(map(str, typing.get_args(hint)))}"
        )


def _owner(name: str) -> type:
    return {"env": EnvConfig, "policy": PolicyConfig, "train": TrainConfig, "run": RunConfig}[
        name.split(".")[0]
    ]


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, globalns=globals())


def to_dict(config: Config) -> dict[str, Any]:
    return dataclasses.asdict(config)


def from_dict(doc: dict[str, Any]) -> Config:
    """Inverse of `to_dict`; unknown keys are an error (a config from another version)."""
    sections = {"env": EnvConfig, "policy": PolicyConfig, "train": TrainConfig, "run": RunConfig}
    top = {}
    for key, value in doc.items():
        if key in sections:
            top[key] = _section(sections[key], key, value)
        elif key in {f.name for f in dataclasses.fields(Config)}:
            top[key] = value
        else:
            raise ValueError(f"unknown config key {key!r}")
    return Config(**top)


def _section(cls: type, name: str, values: dict[str, Any]) -> Any:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"unknown config key {name}.{sorted(unknown)[0]}")
    hints = _hints(cls)
    return cls(**{k: _coerce(hints[k], v) for k, v in values.items()})


def _coerce(hint: Any, value: Any) -> Any:
    if typing.get_origin(hint) is tuple and isinstance(value, list):
        return tuple(value)
    return value


def check_unique(settings: list[str]) -> None:
    """ValueError naming a key that the `--set KEY=VALUE` items give twice."""
    given: set[str] = set()
    for item in settings:
        key = item.partition("=")[0].strip()
        if key in given:
            raise ValueError(f"--set {key} is given twice; give it once")
        given.add(key)


def make_config(preset: str | None = None, overrides: list[str] = (), **top: Any) -> Config:
    """A `Config` from a preset name, then `section.field=value` overrides (CLI `--set`), then
    keyword arguments for the top-level fields (n_devices, cluster_preset, seed)."""
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; the presets are {', '.join(PRESETS)}")
    settings = dict(PRESETS.get(preset, {}) if preset else {})
    for item in overrides:
        key, eq, text = item.partition("=")
        if not eq:
            raise ValueError(f"bad --set {item!r}: expected KEY=VALUE, e.g. train.episodes=128")
        if key.strip() in top and top[key.strip()] is not None:
            raise ValueError(
                f"--set {item.strip()} conflicts with {key.strip()}={top[key.strip()]!r} given "
                "by its own flag; give it once"
            )
        settings[key.strip()] = text.strip()
    config = Config(**top)
    return apply(config, settings)


def apply(config: Config, settings: dict[str, Any]) -> Config:
    """`config` with `section.field` (or top-level `field`) set to each value; strings are parsed
    to the field's type. The settings apply together, so the result is validated once, whatever
    their order."""
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        section, dot, field = key.partition(".")
        if not dot:
            top[section] = _parse(Config, section, value, key)
            continue
        if section not in ("env", "policy", "train", "run"):
            raise ValueError(f"unknown config key {key!r}")
        cls = _owner(key)
        if field not in {f.name for f in dataclasses.fields(cls)}:
            raise ValueError(f"unknown config key {key!r}")
        sections.setdefault(section, {})[field] = _parse(cls, field, value, key)
    inner = {name: dataclasses.replace(getattr(config, name), **fields)
             for name, fields in sections.items()}  # fmt: skip
    return dataclasses.replace(config, **{**top, **inner})


def _parse(cls: type, field: str, value: Any, key: str) -> Any:
    hints = _hints(cls)
    if field not in hints:
        raise ValueError(f"unknown config key {key!r}")
    hint = hints[field]
    if not isinstance(value, str):
        return value
    try:
        return _from_text(hint, value)
    except ValueError:
        raise ValueError(f"bad value {value!r} for config {key}") from None


def _from_text(hint: Any, text: str) -> Any:
    origin = typing.get_origin(hint)
    if hint is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(text)
    if hint is int:
        return int(text)
    if hint is float:
        return float(text)
    if origin is tuple:
        return tuple(int(x) for x in text.split(",") if x.strip())
    if origin in (Literal, types.UnionType) or hint is str:
        return text
    raise ValueError(text)


PIPELINES: dict[str, Pipeline] = {
    # The policy's own episodes: the greedy one (and `samples` sampled), nothing else.
    "policy": Pipeline(),
    # The best fast heuristic on the op graph (`placers.FAST_HEURISTICS`); no policy.
    "heuristics": Pipeline(source="heuristics"),
    # The policy's greedy episode and 16 sampled ones at temperature 0.6, the best kept (0.6:
    # best of 0.3, 0.6, 1.0 for the construct agent on graphs drawn with seed 1; findings.md).
    "sampled": Pipeline(samples=16, temperature=0.6),
    # The configuration of record (docs/findings.md): episodes from the best heuristic, K = 32
    # samples at T = 8, policy-guided search over the groups then the ops (ranked proposals,
    # D - 1 passes) from that start and from the fastest other heuristic, 3 random passes,
    # the memory squeeze.
    "search": Pipeline(
        start="best-op",
        samples=32,
        temperature=8.0,
        search_groups=2,
        search_ops=EVERY_OTHER_DEVICE,
        proposer="ranked",
        random_passes=3,
        second_start=True,
        squeeze=True,
    ),
}


def own_pipeline(config: Config) -> Pipeline:
    """The pipeline that places with a construct policy of `config` alone: its greedy episode
    and 16 sampled ones (`sampled`), or with the lookahead, whose episode simulates thousands
    of placements, the greedy episode (`policy`)."""
    return PIPELINES["policy" if config.env.construct_lookahead else "sampled"]


def make_pipeline(name: str | None = None, overrides: list[str] = ()) -> Pipeline:
    """The named pipeline (`PIPELINES`; None: "policy") with `pipeline.FIELD=VALUE` overrides
    (CLI `--set`); ValueError naming an unknown name, key or a bad value."""
    name = name or "policy"
    if name not in PIPELINES:
        raise ValueError(f"unknown pipeline {name!r}; the pipelines are {', '.join(PIPELINES)}")
    check_unique(list(overrides))
    values = {}
    for item in overrides:
        key, eq, text = (part.strip() for part in item.partition("="))
        section, dot, field = key.partition(".")
        if not eq or section != "pipeline" or not dot:
            raise ValueError(
                f"bad --set {item!r}: expected pipeline.FIELD=VALUE, e.g. pipeline.samples=16"
            )
        values[field] = _parse(Pipeline, field, text, key)
    return dataclasses.replace(PIPELINES[name], **values)
