"""REINFORCE for Placeto as pure JAX: `make_train(config, bank, cluster)` assembles a run once.

One update: B episodes (spread evenly over the bank's graphs) are rolled out in lockstep with
`lax.scan` over steps and `vmap` over episodes; the return of step t is G_t = runtime before
step t - final runtime (incremental rewards, gamma = 1); the per-step baseline b_t is the mean of
G_t over the last `baseline_window` episodes of the same graph (from earlier updates; the first
update uses the batch's own per-graph mean). The loss, averaged over the episodes' real steps, is
-(G_t - b_t) log pi(a_t | s_t) - beta H(pi(. | s_t)); observations are rebuilt from the stored
placement and start times, and the gradient is accumulated over chunks of steps to bound memory.
Adam with global-norm clipping, learning rate decayed linearly, entropy weight decayed linearly;
an update whose loss or gradient is not finite is skipped and counted, never applied.

`make_train` returns a `Train`: jitted `init`, a chunk of `updates`, `greedy` evaluation and the
environment parameters, every function pure, with `env_params` as an argument (so that training
on a subset of the bank's graphs is data: `env_params.playing(ids)`). `Train.run(key, hyper)` is
a whole run from fresh, jit- and vmap-able over keys and over the scalar `Hyper` fields. The
losses and baselines are in `rl/losses.py`. Precision is explicit (float32 by default): the
functions run inside `precision.scope`, so the global `jax_enable_x64` flag does not change a run.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from placeto_jax import precision
from placeto_jax.cluster import Cluster
from placeto_jax.config import Config
from placeto_jax.env.bank import Bank
from placeto_jax.env.core import EnvParams, EnvState, PlacetoEnv
from placeto_jax.nn.policy import PlacetoPolicy
from placeto_jax.rl import losses
from placeto_jax.rl.sharding import EPISODES, replicate, replicated

_CHUNK_NODE_ROWS = 1 << 19  # episodes x padded nodes x steps per gradient chunk (automatic)
EVAL_KEY = 20190531  # fixed: every greedy evaluation starts from the same initial placements
_PROPOSAL_NODE_ROWS = 1 << 16  # units observed at once x padded nodes x graphs (CPU, ptb/30:
#   4 to 16 units at once take 14-15 s a pass, 51 at once 38 s, one at a time 20 s)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Hyper:
    """Scalar hyperparameters that `train` can be vmapped over."""

    learning_rate: jax.Array  # [] initial learning rate
    entropy: jax.Array  # [] initial entropy weight

    @classmethod
    def of(cls, config: Config) -> Hyper:
        return cls(jnp.float32(config.train.learning_rate), jnp.float32(config.train.entropy))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TrainState:
    params: Any  # policy parameters
    opt_state: Any  # optax state
    returns: jax.Array  # [G, W, T] float, G_t of the last W episodes per graph
    filled: jax.Array  # [G] int32 episodes in `returns` per graph (at most W)
    cursor: jax.Array  # [G] int32 next slot per graph
    iteration: jax.Array  # [] int32 updates done
    key: jax.Array  # [2] uint32 raw data of the run's key
    skipped: jax.Array  # [] int32 updates skipped for a non-finite loss or gradient
    found_runtime: jax.Array  # [G] float seconds, lowest runtime any training episode visited
    found_placement: jax.Array  # [G, N] int32, the placement that had it (per graph)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Rollout:
    graph: jax.Array  # [B] int32
    order: jax.Array  # [B, N] int32
    placement: jax.Array  # [T, B, N] int8 placement before each step
    start: jax.Array  # [T, B, N] float µs start times before each step
    action: jax.Array  # [T, B] int32
    reward: jax.Array  # [T, B] float
    active: jax.Array  # [T, B] bool, a real step of its episode
    initial_runtime: jax.Array  # [B] float
    final_runtime: jax.Array  # [B] float
    best_runtime: jax.Array  # [B] float
    final_makespan: jax.Array  # [B] float µs


@dataclasses.dataclass(frozen=True)
class Trainer:
    """Everything static about a run; arrays go through `env_params`."""

    config: Config
    env: PlacetoEnv
    policy: PlacetoPolicy
    n_graphs: int  # G, graphs of the bank (rows of the baseline windows)
    n_steps: int  # T, steps per episode (the bank's most decision units x passes)
    n_pad: int
    optimizer: optax.GradientTransformation
    mesh: Mesh | None = None  # episodes sharded over its "episodes" axis

    @classmethod
    def create(
        cls, config: Config, bank: Bank, broadcast: bool = True, mesh: Mesh | None = None
    ) -> Trainer:
        """`mesh`: shard the episode batch over the mesh's devices (`sharding.episode_mesh`)."""
        if mesh is not None and config.train.episodes % mesh.size:
            raise ValueError(
                f"train.episodes={config.train.episodes} does not split evenly over "
                f"{mesh.size} devices"
            )
        env = PlacetoEnv(config.env, config.n_devices, broadcast)
        policy = PlacetoPolicy(config.policy, config.n_devices, env.n_features, bank.max_level)
        return cls(
            config=config,
            env=env,
            policy=policy,
            n_graphs=bank.n_graphs,
            n_steps=config.env.passes * int(bank.n_units.max()),
            n_pad=bank.n_pad,
            optimizer=optax.chain(
                optax.clip_by_global_norm(config.train.grad_clip), optax.scale_by_adam()
            ),
            mesh=mesh,
        )

    def shard(self, tree: Any, axis: int = 0) -> Any:
        """Constrain every array of `tree` to be split over the mesh along `axis` (episodes)."""
        if self.mesh is None:
            return tree
        spec = PartitionSpec(*([None] * axis), EPISODES)
        sharding = NamedSharding(self.mesh, spec)
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), tree)

    # ------------------------------------------------------------------ state
    def init(self, key: jax.Array, env_params: EnvParams) -> TrainState:
        k_init, k_obs = jax.random.split(key)
        _, obs = self.env.reset(k_obs, env_params)
        params = self.policy.init(k_init, obs)
        window = self.config.train.baseline_window
        return TrainState(
            params=params,
            opt_state=self.optimizer.init(params),
            returns=jnp.zeros((self.n_graphs, window, self.n_steps), jnp.float32),
            filled=jnp.zeros(self.n_graphs, jnp.int32),
            cursor=jnp.zeros(self.n_graphs, jnp.int32),
            iteration=jnp.zeros((), jnp.int32),
            key=jax.random.key_data(key),
            skipped=jnp.zeros((), jnp.int32),
            found_runtime=jnp.full(self.n_graphs, jnp.inf, jnp.float32),
            found_placement=jnp.zeros((self.n_graphs, self.n_pad), jnp.int32),
        )

    # ------------------------------------------------------------------ rollout
    def episode_graphs(self, iteration: jax.Array, env_params: EnvParams) -> jax.Array:
        """[B] graph of each episode, from the K graphs `env_params.graphs`. The update takes
        `train.graphs_per_update` of them (0: all), round-robin and continuing across updates,
        and spreads its episodes evenly over them."""
        b = self.config.train.episodes
        k = self.config.train.graphs_per_update
        playing = env_params.graphs
        n_playing = playing.shape[0]
        if not k or k >= n_playing:
            index = (iteration * b + jnp.arange(b, dtype=jnp.int32)) % n_playing
        else:
            index = (iteration * k + jnp.arange(b, dtype=jnp.int32) % k) % n_playing
        return playing[index]

    def rollout(
        self,
        key: jax.Array,
        params: Any,
        graphs: jax.Array,
        env_params: EnvParams,
        greedy: bool,
        temperature: jax.Array | float = 1.0,
    ) -> tuple[Rollout, EnvState]:
        """One episode per entry of `graphs` [B], in lockstep (`greedy`: argmax actions; else
        actions drawn by `sample_action` at `temperature`)."""
        k_reset, k_steps = jax.random.split(key)
        n_episodes = graphs.shape[0]
        graphs = self.shard(graphs)
        if greedy:  # the same start for a graph whatever else is played beside it
            reset = jax.vmap(lambda g: self.env.reset(k_reset, env_params.on_graph(g), True))
            state, obs = self.shard(reset(graphs))
        else:
            reset = jax.vmap(lambda k, g: self.env.reset(k, env_params.on_graph(g)))
            state, obs = self.shard(reset(jax.random.split(k_reset, n_episodes), graphs))
        initial = state.runtime

        def step(carry, step_key):
            state, obs = self.shard(carry)
            logits = jax.vmap(self.policy.apply, (None, 0))(params, obs)
            if greedy:
                action = jnp.argmax(logits, axis=-1)
            else:
                action = sample_action(step_key, logits, temperature)
            active = state.t < self.env.n_steps(state.graph, env_params)
            record = (state.placement.astype(jnp.int8), state.start, action, active)
            state, obs, reward, _ = jax.vmap(self.env.step, (None, 0, 0, None))(
                step_key, state, action, env_params
            )
            return self.shard((state, obs)), self.shard((*record, reward))

        (state, _), (placement, start, action, active, reward) = jax.lax.scan(
            step, (state, obs), jax.random.split(k_steps, self.n_steps)
        )
        rollout = Rollout(
            graph=graphs,
            order=state.order,
            placement=placement,
            start=start,
            action=action.astype(jnp.int32),
            reward=reward,
            active=active,
            initial_runtime=initial,
            final_runtime=state.runtime,
            best_runtime=state.best_runtime,
            final_makespan=state.makespan,
        )
        return rollout, state

    def greedy(self, params: Any, env_params: EnvParams) -> dict[str, jax.Array]:
        """One greedy episode per graph of `env_params.graphs` (K): per-graph arrays [K]
        (runtimes in the env's units), the best placement [K, N] and every visited placement
        [T + 1, K, N] int8 (the initial one first)."""
        rollout, state = self.rollout(
            jax.random.key(EVAL_KEY), params, env_params.graphs, env_params, greedy=True
        )
        return {
            "initial_runtime": rollout.initial_runtime,
            "final_runtime": rollout.final_runtime,
            "best_runtime": state.best_runtime,
            "initial_placement": rollout.placement[0].astype(jnp.int32),
            "best_placement": state.best_placement,
            "visited": _visited(rollout, state),
        }

    def sample(
        self,
        key: jax.Array,
        params: Any,
        env_params: EnvParams,
        count: int,
        temperature: jax.Array | float = 1.0,
    ) -> dict[str, jax.Array]:
        """`count` (static) sampled episodes on each of the K graphs of `env_params.graphs`, at
        `temperature` (traced: one compile for all): "visited" [T + 1, K * count, N] int8, every
        placement they visited (the initial one first), and "runtime" [T + 1, K * count], each
        one's runtime in the env's units; graph k's episodes are columns k * count to
        (k + 1) * count - 1."""
        graphs = jnp.repeat(env_params.graphs, count)
        rollout, state = self.rollout(key, params, graphs, env_params, False, temperature)
        done = jnp.concatenate([jnp.zeros_like(rollout.reward[:1]), rollout.reward]).cumsum(0)
        return {"visited": _visited(rollout, state), "runtime": rollout.initial_runtime - done}

    def proposals(
        self,
        params: Any,
        env_params: EnvParams,
        placement: jax.Array,
        passes_done: jax.Array,
        key: jax.Array,
        proposer: str = "policy",
    ) -> jax.Array:
        """[K, N] int32: for each graph of `env_params.graphs` (K) and unit id (below its unit
        count), the device policy-guided search proposes on pass `passes_done` ([] int32) of a
        search that starts the pass from `placement` [K, N] (device per node): the policy's
        most likely allowed device other than the unit's own, observed as that placement with
        the unit current (`proposer="ranked"`: its (p mod m)-th most likely of the m allowed
        others, ties to the lowest index; `"random"`: a uniformly random allowed other one,
        drawn from `key`, the pass and the graph), or its own device when no other is allowed.
        Every unit of a graph is observed at once, in batches. Needs the config's given starts
        (`env.initial_placement="given"`): `placement` is the start the env simulates."""
        _check_proposer(proposer)
        if self.config.env.initial_placement != "given":
            raise ValueError("proposals need env.initial_placement=given")
        graphs = env_params.graphs
        starts = jnp.zeros_like(env_params.bank.unit).at[graphs].set(placement)
        given = dataclasses.replace(
            env_params, bank=dataclasses.replace(env_params.bank, start=starts)
        )
        batch = max(1, _PROPOSAL_NODE_ROWS // (graphs.shape[0] * self.n_pad))

        def on_graph(graph):
            state, _ = self.env.reset(jax.random.key(EVAL_KEY), given.on_graph(graph))
            first = passes_done * env_params.bank.n_units[graph]
            graph_key = jax.random.fold_in(jax.random.fold_in(key, passes_done), graph)

            def at(position):
                obs = self.env.observe(dataclasses.replace(state, t=first + position), given)
                n_dev = obs.action_mask.shape[0]
                own = jnp.max(jnp.where(obs.current, obs.placement, -1))
                others = obs.action_mask & (jnp.arange(n_dev) != own)
                if proposer == "random":
                    logits = jax.random.uniform(jax.random.fold_in(graph_key, position), (n_dev,))
                else:
                    logits = self.policy.apply(params, obs)
                scores = jnp.where(others, logits, -jnp.inf)
                rank = passes_done % jnp.maximum(others.sum(), 1) if proposer == "ranked" else 0
                proposal = jnp.argsort(-scores, stable=True)[rank]  # allowed ones first
                return jnp.where(others.any(), proposal, own).astype(jnp.int32)

            by_position = jax.lax.map(at, jnp.arange(self.n_pad), batch_size=batch)
            return jnp.zeros(self.n_pad, jnp.int32).at[state.order].set(by_position)

        return jax.vmap(on_graph)(graphs)

    # ------------------------------------------------------------------ loss
    def grad_chunk(self) -> int:
        if self.config.train.grad_chunk:
            return min(self.config.train.grad_chunk, self.n_steps)
        rows = self.config.train.episodes * self.n_pad
        return max(1, min(self.n_steps, _CHUNK_NODE_ROWS // rows))

    def loss_and_grad(
        self,
        params: Any,
        rollout: Rollout,
        advantage: jax.Array,
        entropy_weight: jax.Array,
        env_params: EnvParams,
    ) -> tuple[jax.Array, jax.Array, Any]:
        """(loss, mean entropy, gradient), accumulated over chunks of steps; observations are
        rebuilt from the stored trajectory by the rollout's own `env.observe`."""
        chunk = self.grad_chunk()
        n_chunks = -(-self.n_steps // chunk)
        pad = n_chunks * chunk - self.n_steps

        def chunked(x: jax.Array) -> jax.Array:
            x = jnp.pad(x, [(0, pad)] + [(0, 0)] * (x.ndim - 1))
            return x.reshape(n_chunks, chunk, *x.shape[1:])

        steps = jnp.arange(self.n_steps, dtype=jnp.int32)
        per_episode = (rollout.placement, rollout.start, rollout.action, rollout.active, advantage)
        per_step = (
            chunked(steps),
            *self.shard(tuple(chunked(x) for x in per_episode), axis=2),  # [chunks, chunk, B..]
        )
        n_active = jnp.maximum(rollout.active.sum(), 1)
        observe_episodes = jax.vmap(self.env.observe, (0, None))

        def observe_step(t, placement, start):  # [] step, [B, N] placement and starts
            t = jnp.broadcast_to(t, rollout.graph.shape)
            placement = placement.astype(jnp.int32)
            state = EnvState.replayed(rollout.graph, rollout.order, t, placement, start)
            return observe_episodes(state, env_params)

        def chunk_loss(p, data):
            t, placement, start, action, active, adv = data
            obs = jax.vmap(observe_step)(t, placement, start)
            logits = jax.vmap(jax.vmap(self.policy.apply, (None, 0)), (None, 0))(p, obs)
            return losses.policy_loss(logits, action, active, adv, entropy_weight, n_active)

        def accumulate(carry, data):
            loss, entropy, grad = carry
            (l, e), g = jax.value_and_grad(chunk_loss, has_aux=True)(params, data)
            return (loss + l, entropy + e, jax.tree.map(jnp.add, grad, g)), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        start = (jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32), zeros)
        (loss, entropy, grad), _ = jax.lax.scan(accumulate, start, per_step)
        return loss, entropy / n_active, grad

    # ------------------------------------------------------------------ update
    def schedules(self, iteration: jax.Array, hyper: Hyper) -> tuple[jax.Array, jax.Array]:
        """(learning rate, entropy weight) at `iteration`."""
        cfg = self.config.train
        iteration = jnp.asarray(iteration, jnp.float32)
        progress = iteration / cfg.iterations
        ratio = cfg.final_learning_rate / cfg.learning_rate
        lr = hyper.learning_rate * (1.0 - progress * (1.0 - ratio))
        decay = jnp.minimum(iteration / (cfg.entropy_decay_fraction * cfg.iterations), 1.0)
        entropy = hyper.entropy * (1.0 - decay) + cfg.final_entropy * decay
        return lr, entropy

    def update(
        self, state: TrainState, hyper: Hyper, env_params: EnvParams
    ) -> tuple[TrainState, dict[str, jax.Array]]:
        key = jax.random.fold_in(jax.random.wrap_key_data(state.key), state.iteration)
        graphs = self.episode_graphs(state.iteration, env_params)
        rollout, final = self.rollout(key, state.params, graphs, env_params, greedy=False)
        found_runtime, found_placement = found_so_far(
            state.found_runtime, state.found_placement, rollout.graph, final
        )
        returns = losses.returns_to_go(rollout.reward)
        if self.config.train.baseline == "none":
            baseline = jnp.zeros_like(returns)
        else:
            baseline = losses.window_baseline(state.returns, state.filled, rollout.graph, returns)
        advantage = jnp.where(rollout.active, returns - baseline, 0)
        if self.config.train.normalize_advantage:
            advantage = losses.normalized(advantage, rollout.active)
        lr, entropy_weight = self.schedules(state.iteration, hyper)
        loss, entropy, grad = self.loss_and_grad(
            state.params, rollout, advantage, entropy_weight, env_params
        )
        updates, opt_state = self.optimizer.update(grad, state.opt_state, state.params)
        params = optax.apply_updates(state.params, jax.tree.map(lambda u: -lr * u, updates))
        finite = jnp.isfinite(loss) & jnp.all(
            jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grad)])
        )
        keep_new = _keep_if(finite)
        buffer, filled, cursor = losses.push_returns(
            state.returns, state.filled, state.cursor, rollout.graph, returns
        )
        new_state = TrainState(
            params=jax.tree.map(keep_new, params, state.params),
            opt_state=jax.tree.map(keep_new, opt_state, state.opt_state),
            returns=buffer,
            filled=filled,
            cursor=cursor,
            iteration=state.iteration + 1,
            key=state.key,
            skipped=state.skipped + (~finite).astype(jnp.int32),
            found_runtime=found_runtime,
            found_placement=found_placement,
        )
        metrics = {
            "train/loss": loss,
            "train/entropy": entropy,
            "train/grad_norm": optax.tree.norm(grad),
            "train/learning_rate": lr,
            "train/entropy_weight": entropy_weight,
            "train/initial_runtime": rollout.initial_runtime.mean(),
            "train/final_runtime": rollout.final_runtime.mean(),
            "train/best_runtime": rollout.best_runtime.mean(),
            "train/final_makespan_us": rollout.final_makespan.mean(),
            "train/improvement_vs_start": (rollout.initial_runtime - rollout.final_runtime).mean(),
            "train/skipped_updates": new_state.skipped,
        }
        return new_state, metrics

    def updates(
        self, state: TrainState, hyper: Hyper, env_params: EnvParams, count: int
    ) -> tuple[TrainState, dict[str, jax.Array]]:
        """`count` (static) updates in one `lax.scan`; metrics stacked to [count]."""
        return jax.lax.scan(
            lambda s, _: self.update(s, hyper, env_params), state, None, length=count
        )


PROPOSERS = ("policy", "ranked", "random")  # what policy-guided search proposes (`proposals`)


def _check_proposer(proposer: str) -> None:
    if proposer not in PROPOSERS:
        raise ValueError(f"proposer must be one of {PROPOSERS}, got {proposer!r}")


def sample_action(key: jax.Array, logits: jax.Array, temperature: jax.Array | float) -> jax.Array:
    """[...] int: a device drawn from softmax(logits / temperature) over the last axis of
    `logits` [..., D]; temperature 1 is the policy's own distribution, bit for bit."""
    return jax.random.categorical(key, logits / temperature)


def found_so_far(
    runtime: jax.Array, placement: jax.Array, graph: jax.Array, final: EnvState
) -> tuple[jax.Array, jax.Array]:
    """The lowest runtime [G] (seconds) and its placement [G, N] per graph, after episodes on
    `graph` [B] whose final states `final` hold each episode's best (every one an exact
    simulation that training already paid for)."""
    seconds = final.best_runtime * final.scale  # [B] un-normalised
    mine = graph[None, :] == jnp.arange(runtime.shape[0])[:, None]  # [G, B]
    candidates = jnp.where(mine, seconds[None, :], jnp.inf)
    episode = jnp.argmin(candidates, axis=1)  # [G]
    best = jnp.take_along_axis(candidates, episode[:, None], axis=1)[:, 0]
    better = best < runtime
    return (
        jnp.where(better, best, runtime).astype(runtime.dtype),
        jnp.where(better[:, None], final.best_placement[episode], placement),
    )


def _visited(rollout: Rollout, state: EnvState) -> jax.Array:
    """[T + 1, B, N] int8: the placement before every step, then the final one."""
    return jnp.concatenate([rollout.placement, state.placement[None].astype(jnp.int8)])


def _keep_if(keep_new: jax.Array) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """f(new, old) = new where `keep_new` else old (a skipped update leaves the state as is)."""
    return lambda new, old: jnp.where(keep_new, new, old)


class Train(NamedTuple):
    """A run assembled once by `make_train`: pure functions, jitted, and their constants."""

    init: Callable[[jax.Array, EnvParams], TrainState]  # (key, env_params) -> fresh state
    updates: Callable[..., tuple[TrainState, dict[str, jax.Array]]]
    # (state, hyper, env_params, count=K static) -> (state, metrics [K])
    greedy: Callable[[Any, EnvParams], dict[str, jax.Array]]  # (params, env_params) -> arrays [K]
    sample: Callable[..., dict[str, jax.Array]]
    # (key, params, env_params, count=C static, temperature=1.0) -> visited, runtime
    proposals: Callable[..., jax.Array]
    # (params, env_params, placement [K, N], passes_done, key, proposer="policy" static) -> [K, N]
    env_params: EnvParams  # the whole bank, every graph played (replicated on the mesh)
    hyper: Hyper  # the config's learning rate and entropy weight
    trainer: Trainer  # the static parts (shapes, config, networks)

    def run(self, key: jax.Array, hyper: Hyper | None = None):
        """(final state, metrics [iterations]): every update of the config from a fresh state,
        a pure function of its arguments to jit and vmap over keys and `Hyper` fields."""
        hyper = self.hyper if hyper is None else hyper
        state = self.init(key, self.env_params)
        count = self.trainer.config.train.iterations
        return self.updates(state, hyper, self.env_params, count=count)


def make_train(
    config: Config,
    bank: Bank,
    cluster: Cluster,
    mesh: Mesh | None = None,
    float_dtype: Any = jnp.float32,
) -> Train:
    """Assemble a run on `bank` and `cluster`: the environment parameters in `float_dtype`,
    the jitted init, chunk of updates, greedy and sampled episodes and the search's proposals,
    each traced and run inside `precision.scope(float_dtype)`. `mesh`
    (`sharding.episode_mesh()`) splits the episodes over its devices; the constants are then
    replicated on it."""
    trainer = Trainer.create(config, bank, cluster.broadcast, mesh)
    env_params = bank_env_params(trainer, bank, cluster, float_dtype)
    hyper = Hyper.of(config)
    init = jax.jit(trainer.init)
    if mesh is not None:
        env_params, hyper = replicate((env_params, hyper), mesh)
        init = jax.jit(trainer.init, out_shardings=replicated(mesh))
    return Train(
        init=precision.Scoped(init, float_dtype),
        updates=precision.Scoped(jax.jit(trainer.updates, static_argnames="count"), float_dtype),
        greedy=precision.Scoped(jax.jit(trainer.greedy), float_dtype),
        sample=precision.Scoped(jax.jit(trainer.sample, static_argnames="count"), float_dtype),
        proposals=precision.Scoped(
            jax.jit(trainer.proposals, static_argnames="proposer"), float_dtype
        ),
        env_params=env_params,
        hyper=hyper,
        trainer=trainer,
    )


def bank_env_params(
    trainer: Trainer, bank: Bank, cluster: Cluster, float_dtype: Any = jnp.float32
) -> EnvParams:
    """The environment parameters of `bank` for `trainer`'s programs, in `float_dtype`."""
    with precision.scope(float_dtype):  # float64 arrays need 64-bit types on
        return trainer.env.env_params(bank, cluster, float_dtype)


RUNS_KEPT = 4  # compiled runs kept for reuse (`compiled_run`; each holds its programs)
_runs: collections.OrderedDict = collections.OrderedDict()


def compiled_run(config: Config, bank: Bank, cluster: Cluster) -> tuple[Train, EnvParams]:
    """A run whose programs play `bank`, and `bank`'s environment parameters. A run kept for a
    bank of the same static shape (config, cluster, graphs, padding, steps, levels) is reused
    with `bank` as data, so training and the placements after it, or the search stages of one
    pipeline, compile once instead of once each. Outputs are those of a fresh run."""
    key = _run_key(config, bank, cluster)
    run = _runs.get(key)
    if run is None:
        run = make_train(config, bank, cluster)
        keep_run(run, bank, cluster)
        return run, run.env_params
    _runs.move_to_end(key)
    return run, bank_env_params(run.trainer, bank, cluster)


def keep_run(run: Train, bank: Bank, cluster: Cluster) -> None:
    """Keep `run` (built on `bank`, no mesh) for `compiled_run`, the oldest dropped past
    `RUNS_KEPT`."""
    _runs[_run_key(run.trainer.config, bank, cluster)] = run
    while len(_runs) > RUNS_KEPT:
        _runs.popitem(last=False)


def forget_compiled_runs() -> None:
    """Drop the kept runs, so that their compiled programs can be freed."""
    _runs.clear()


def _run_key(config: Config, bank: Bank, cluster: Cluster) -> tuple:
    return (config, cluster, bank.n_graphs, bank.n_pad, bank.max_level, int(bank.n_units.max()))
