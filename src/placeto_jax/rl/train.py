"""REINFORCE for Placeto as pure JAX: `make_train(config, bank, cluster) -> train(key, hyper)`.

One update: B episodes (spread evenly over the bank's graphs) are rolled out in lockstep with
`lax.scan` over steps and `vmap` over episodes; the return of step t is G_t = runtime before
step t - final runtime (incremental rewards, gamma = 1); the per-step baseline b_t is the mean of
G_t over the last `baseline_window` episodes of the same graph (from earlier updates; the first
update uses the batch's own per-graph mean). The loss, averaged over the episodes' real steps, is
-(G_t - b_t) log pi(a_t | s_t) - beta H(pi(. | s_t)); observations are rebuilt from the stored
placement and start times, and the gradient is accumulated over chunks of steps to bound memory.
Adam with global-norm clipping, learning rate decayed linearly, entropy weight decayed linearly;
an update whose loss or gradient is not finite is skipped and counted, never applied.

`train(key, hyper)` is jit- and vmap-able over keys and over the scalar `Hyper` fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from placeto_jax.cluster import Cluster
from placeto_jax.config import Config
from placeto_jax.env.bank import Bank
from placeto_jax.env.core import EnvParams, EnvState, PlacetoEnv
from placeto_jax.nn.policy import PlacetoPolicy
from placeto_jax.rl.sharding import EPISODES

_CHUNK_NODE_ROWS = 1 << 19  # episodes x padded nodes x steps per gradient chunk (automatic)


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
    n_graphs: int
    n_steps: int  # T, steps per episode (the bank's largest graph x passes)
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
            n_steps=config.env.passes * int(bank.n_nodes.max()),
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
        _, obs = self.env.reset(k_obs, env_params, jnp.int32(0))
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
        )

    # ------------------------------------------------------------------ rollout
    def episode_graphs(self, iteration: jax.Array) -> jax.Array:
        """[B] graph of each episode. The update takes `train.graphs_per_update` graphs
        (0: all), round-robin over the bank and continuing across updates, and spreads its
        episodes evenly over them."""
        b = self.config.train.episodes
        k = self.config.train.graphs_per_update
        if not k or k >= self.n_graphs:
            return ((iteration * b + jnp.arange(b)) % self.n_graphs).astype(jnp.int32)
        return ((iteration * k + jnp.arange(b) % k) % self.n_graphs).astype(jnp.int32)

    def rollout(
        self, params: Any, env_params: EnvParams, key: jax.Array, graphs: jax.Array, greedy: bool
    ) -> tuple[Rollout, EnvState]:
        k_reset, k_steps = jax.random.split(key)
        n_episodes = graphs.shape[0]
        graphs = self.shard(graphs)
        state, obs = self.shard(
            jax.vmap(self.env.reset, (0, None, 0))(
                jax.random.split(k_reset, n_episodes), env_params, graphs
            )
        )
        initial = state.runtime

        def step(carry, step_key):
            state, obs = self.shard(carry)
            logits = jax.vmap(self.policy.apply, (None, 0))(params, obs)
            if greedy:
                action = jnp.argmax(logits, axis=-1)
            else:
                action = jax.random.categorical(step_key, logits)
            active = state.t < self.env.n_steps(env_params, state.graph)
            record = (state.placement.astype(jnp.int8), state.start, action, active)
            state, obs, reward, _ = jax.vmap(self.env.step, (0, 0, None))(state, action, env_params)
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

    # ------------------------------------------------------------------ loss
    def baseline(self, state: TrainState, rollout: Rollout, returns: jax.Array) -> jax.Array:
        """[T, B] b_t per episode: the window mean of its graph, or this batch's per-graph
        mean where the graph has no history yet."""
        if self.config.train.baseline == "none":
            return jnp.zeros_like(returns)
        window_mean = state.returns.sum(axis=1) / jnp.maximum(state.filled, 1)[:, None]  # [G, T]
        one_hot = jax.nn.one_hot(rollout.graph, self.n_graphs, dtype=returns.dtype)  # [B, G]
        batch_mean = (returns @ one_hot) / jnp.maximum(one_hot.sum(axis=0), 1)  # [T, G]
        per_graph = jnp.where(state.filled[None, :] > 0, window_mean.T, batch_mean)  # [T, G]
        return per_graph[:, rollout.graph]

    def push_returns(self, state: TrainState, rollout: Rollout, returns: jax.Array):
        """(returns, filled, cursor) with this batch's last W episodes per graph appended."""
        window = self.config.train.baseline_window
        one_hot = jax.nn.one_hot(rollout.graph, self.n_graphs, dtype=jnp.int32)  # [B, G]
        count = one_hot.sum(axis=0)  # [G]
        rank = (jnp.cumsum(one_hot, axis=0) - 1)[jnp.arange(one_hot.shape[0]), rollout.graph]
        skip = jnp.maximum(count - window, 0)[rollout.graph]  # [B] older episodes not kept
        keep = rank >= skip
        slot = (state.cursor[rollout.graph] + rank - skip) % window
        row = jnp.where(keep, rollout.graph, self.n_graphs)  # out of range: dropped
        buffer = state.returns.at[row, slot].set(returns.T, mode="drop")
        stored = jnp.minimum(count, window)
        return (
            buffer,
            jnp.minimum(state.filled + stored, window),
            (state.cursor + stored) % window,
        )

    def grad_chunk(self) -> int:
        if self.config.train.grad_chunk:
            return min(self.config.train.grad_chunk, self.n_steps)
        rows = self.config.train.episodes * self.n_pad
        return max(1, min(self.n_steps, _CHUNK_NODE_ROWS // rows))

    def loss_and_grad(
        self,
        params: Any,
        env_params: EnvParams,
        rollout: Rollout,
        advantage: jax.Array,
        entropy_weight: jax.Array,
    ) -> tuple[jax.Array, jax.Array, Any]:
        """(loss, mean entropy, gradient), accumulated over chunks of steps."""
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

        def chunk_loss(p, data):
            t, placement, start, action, active, adv = data
            observe = jax.vmap(  # over steps, then episodes
                jax.vmap(self.env.observation, (None, 0, 0, None, 0, 0)),
                (None, None, None, 0, 0, 0),
            )
            obs = observe(
                env_params, rollout.graph, rollout.order, t, placement.astype(jnp.int32), start
            )
            logits = jax.vmap(jax.vmap(self.policy.apply, (None, 0)), (None, 0))(p, obs)
            log_p = jax.nn.log_softmax(logits)
            chosen = jnp.take_along_axis(log_p, action[..., None], axis=-1)[..., 0]
            entropy = -jnp.sum(jnp.exp(log_p) * log_p, axis=-1)
            policy_term = -jnp.sum(jnp.where(active, adv * chosen, 0.0))
            entropy_sum = jnp.sum(jnp.where(active, entropy, 0.0))
            return (policy_term - entropy_weight * entropy_sum) / n_active, entropy_sum

        def accumulate(carry, data):
            loss, entropy, grad = carry
            (l, e), g = jax.value_and_grad(chunk_loss, has_aux=True)(params, data)
            return (loss + l, entropy + e, jax.tree.map(jnp.add, grad, g)), None

        zeros = jax.tree.map(jnp.zeros_like, params)
        (loss, entropy, grad), _ = jax.lax.scan(
            accumulate, (jnp.zeros(()), jnp.zeros(()), zeros), per_step
        )
        return loss, entropy / n_active, grad

    # ------------------------------------------------------------------ update
    def schedules(self, iteration: jax.Array, hyper: Hyper) -> tuple[jax.Array, jax.Array]:
        """(learning rate, entropy weight) at `iteration`."""
        cfg = self.config.train
        progress = iteration / cfg.iterations
        ratio = cfg.final_learning_rate / cfg.learning_rate
        lr = hyper.learning_rate * (1.0 - progress * (1.0 - ratio))
        decay = jnp.minimum(iteration / (cfg.entropy_decay_fraction * cfg.iterations), 1.0)
        entropy = hyper.entropy * (1.0 - decay) + cfg.final_entropy * decay
        return lr, entropy

    def update(
        self, state: TrainState, env_params: EnvParams, hyper: Hyper
    ) -> tuple[TrainState, dict[str, jax.Array]]:
        key = jax.random.fold_in(jax.random.wrap_key_data(state.key), state.iteration)
        graphs = self.episode_graphs(state.iteration)
        rollout, _ = self.rollout(state.params, env_params, key, graphs, greedy=False)
        returns = jnp.cumsum(rollout.reward[::-1], axis=0)[::-1]  # [T, B] G_t
        advantage = jnp.where(rollout.active, returns - self.baseline(state, rollout, returns), 0)
        if self.config.train.normalize_advantage:
            n_active = jnp.maximum(rollout.active.sum(), 1)
            spread = jnp.sqrt(jnp.sum(advantage**2) / n_active)
            advantage = advantage / jnp.maximum(spread, 1e-8)
        lr, entropy_weight = self.schedules(state.iteration, hyper)
        loss, entropy, grad = self.loss_and_grad(
            state.params, env_params, rollout, advantage, entropy_weight
        )
        updates, opt_state = self.optimizer.update(grad, state.opt_state, state.params)
        params = optax.apply_updates(state.params, jax.tree.map(lambda u: -lr * u, updates))
        finite = jnp.isfinite(loss) & jnp.all(
            jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grad)])
        )
        keep_new = _keep_if(finite)
        buffer, filled, cursor = self.push_returns(state, rollout, returns)
        new_state = TrainState(
            params=jax.tree.map(keep_new, params, state.params),
            opt_state=jax.tree.map(keep_new, opt_state, state.opt_state),
            returns=buffer,
            filled=filled,
            cursor=cursor,
            iteration=state.iteration + 1,
            key=state.key,
            skipped=state.skipped + (~finite).astype(jnp.int32),
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
            "train/improvement": (rollout.initial_runtime - rollout.final_runtime).mean(),
            "train/skipped_updates": new_state.skipped,
        }
        return new_state, metrics

    def updates(
        self, state: TrainState, env_params: EnvParams, hyper: Hyper, count: int
    ) -> tuple[TrainState, dict[str, jax.Array]]:
        """`count` (static) updates in one `lax.scan`; metrics stacked to [count]."""
        return jax.lax.scan(
            lambda s, _: self.update(s, env_params, hyper), state, None, length=count
        )


def _keep_if(keep_new: jax.Array) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """f(new, old) = new where `keep_new` else old (a skipped update leaves the state as is)."""
    return lambda new, old: jnp.where(keep_new, new, old)


def make_train(
    config: Config, bank: Bank, cluster: Cluster
) -> Callable[[jax.Array, Hyper | None], tuple[TrainState, dict[str, jax.Array]]]:
    """`train(key, hyper=None) -> (final state, metrics [iterations] per key)`: a pure function
    of its arguments (the bank and cluster are constants), to jit and vmap over keys and
    `Hyper` fields."""
    trainer = Trainer.create(config, bank, cluster.broadcast)
    env_params = trainer.env.params(bank, cluster)

    def train(key: jax.Array, hyper: Hyper | None = None):
        hyper = Hyper.of(config) if hyper is None else hyper
        state = trainer.init(key, env_params)
        return trainer.updates(state, env_params, hyper, config.train.iterations)

    return train
