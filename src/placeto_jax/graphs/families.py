"""Graph families for generalisation experiments: training steps of architectures sampled from the
ENAS search spaces (Pham et al. 2018), 32 graphs per family as in Placeto.

Each graph is the whole training step (forward, loss, gradient, optimizer update) of a Flax Linen
model, traced with `from_jax` on the default `placeto-k80` roofline; nothing is executed. Time
loops are unrolled in Python, so every step's ops are ops of the graph. Models and parameters
are float32; the step is traced with 64-bit types on (`precision.scope(np.float64)`, as the
command line always traced it), where optax's scalar arithmetic adds a few conversion ops (about
50 for Adam), so that a family graph is the same graph whoever builds it. The embedding gradient
(`scatter-add`) has no FLOP count in the roofline model and is priced by bytes (with a warning).

Sampling is deterministic from (family, seed, index) with
`numpy.random.default_rng([seed, index, FAMILIES.index(family)])`; every choice is uniform.

- **RNN cell** (ptb, nmt): N = 8 nodes. Node 0 reads the step input x and the previous state h:
  `n0 = act0(W x + U h)`; node i >= 1 picks one previous node j < i: `ni = acti(Wi nj)`. The
  activations are drawn from {tanh, relu, identity, sigmoid}; the new state is the average of
  the loose ends (nodes no other node reads).
- **CNN cell** (cifar10): inputs 0 and 1 are the outputs of the two previous cells; nodes 2..6
  each pick two inputs among the earlier nodes and an op for each from {identity, 3x3 and 5x5
  separable conv (ReLU, depthwise, 1x1; no batch norm), 3x3 avg and max pool} and sum the two
  results. The cell output concatenates the loose ends and projects them back to C channels
  with a 1x1 conv. After a stride-2 reduction both inputs of the next cell are its output.
- **cifar10**: images 32x32x3, batch 32, 10 classes. A 3x3 stem conv to C channels, then three
  stages of `cells` copies of the sampled cell (32x32, 16x16, 8x8) separated by stride-2 3x3
  convs that double the channels, global average pooling and a dense classifier. Sampled: the
  cell, C in {16, 24, 32}, cells in {1, 2}. SGD with momentum 0.9.
- **ptb**: a 2-layer RNN language model with the sampled cell, vocabulary 10000, batch 20:
  embedding, two stacked cells unrolled over `steps` time steps, a dense softmax over the
  vocabulary. Sampled: the cell, hidden in {200, 300, 400, 650}, steps in 20..35. Plain SGD.
- **nmt**: an attention encoder-decoder, vocabularies 8000, batch 32: an encoder cell over
  `src_steps` source steps and a decoder cell over `tgt_steps` target steps (teacher forcing),
  each decoder state attending (dot product) over the encoder states, then a tanh projection
  and a dense softmax. Sampled: the encoder and decoder cells, hidden in {256, 384, 512},
  src_steps and tgt_steps in 10..20. Adam.

Splits are fixed: indices 0-23 are "train", 24-31 "test". Graph names are `family:FAMILY/INDEX`
(with `:SEED` appended for a seed other than 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from placeto_jax import precision
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.grouping import group
from placeto_jax.graphs.trace import from_jax

FAMILIES = ("cifar10", "ptb", "nmt")
FAMILY_SIZE = 32
SPLITS = {"train": range(0, 24), "test": range(24, 32), "all": range(0, FAMILY_SIZE)}

RNN_NODES = 8
RNN_ACTIVATIONS = ("tanh", "relu", "identity", "sigmoid")
CNN_NODES = 5  # computed nodes, after the two cell inputs
CNN_OPS = ("identity", "sep_conv_3x3", "sep_conv_5x5", "avg_pool_3x3", "max_pool_3x3")

S = jax.ShapeDtypeStruct


# ---------------------------------------------------------------------- architectures
@dataclasses.dataclass(frozen=True)
class RnnCell:
    """An ENAS RNN cell: node i >= 1 reads node `inputs[i - 1]`; node i applies
    `activations[i]`."""

    inputs: tuple[int, ...]  # [RNN_NODES - 1]
    activations: tuple[str, ...]  # [RNN_NODES]

    @property
    def loose_ends(self) -> tuple[int, ...]:
        return tuple(i for i in range(len(self.activations)) if i not in self.inputs)


@dataclasses.dataclass(frozen=True)
class CnnCell:
    """An ENAS convolutional cell: node i + 2 sums `ops[i][k]` applied to node `inputs[i][k]`
    for k = 0, 1 (nodes 0 and 1 are the cell inputs)."""

    inputs: tuple[tuple[int, int], ...]  # [CNN_NODES]
    ops: tuple[tuple[str, str], ...]  # [CNN_NODES]

    @property
    def loose_ends(self) -> tuple[int, ...]:
        used = {j for pair in self.inputs for j in pair}
        return tuple(i for i in range(2, CNN_NODES + 2) if i not in used)


@dataclasses.dataclass(frozen=True)
class Cifar10Architecture:
    """A cifar10 CNN: the sampled cell, `cells` copies per stage at `channels` (doubling)."""

    cell: CnnCell
    channels: int
    cells: int  # cells per stage
    batch: int = 32
    image: int = 32
    classes: int = 10


@dataclasses.dataclass(frozen=True)
class PtbArchitecture:
    """A ptb language model: `layers` stacked copies of the sampled cell over `steps` steps."""

    cell: RnnCell
    hidden: int
    steps: int
    layers: int = 2
    batch: int = 20
    vocab: int = 10000


@dataclasses.dataclass(frozen=True)
class NmtArchitecture:
    """An nmt attention encoder-decoder with sampled encoder and decoder cells."""

    encoder: RnnCell
    decoder: RnnCell
    hidden: int
    src_steps: int
    tgt_steps: int
    batch: int = 32
    vocab: int = 8000


Architecture = Cifar10Architecture | PtbArchitecture | NmtArchitecture


def _choice(rng: np.random.Generator, options: Sequence[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def sample_rnn_cell(rng: np.random.Generator) -> RnnCell:
    inputs = tuple(int(rng.integers(i)) for i in range(1, RNN_NODES))
    activations = tuple(_choice(rng, RNN_ACTIVATIONS) for _ in range(RNN_NODES))
    return RnnCell(inputs, activations)


def sample_cnn_cell(rng: np.random.Generator) -> CnnCell:
    nodes = range(2, CNN_NODES + 2)
    inputs = tuple((int(rng.integers(i)), int(rng.integers(i))) for i in nodes)
    ops = tuple((_choice(rng, CNN_OPS), _choice(rng, CNN_OPS)) for _ in nodes)
    return CnnCell(inputs, ops)


def _sample_cifar10(rng: np.random.Generator) -> Cifar10Architecture:
    return Cifar10Architecture(
        sample_cnn_cell(rng), _choice(rng, (16, 24, 32)), _choice(rng, (1, 2))
    )


def _sample_ptb(rng: np.random.Generator) -> PtbArchitecture:
    cell = sample_rnn_cell(rng)
    return PtbArchitecture(cell, _choice(rng, (200, 300, 400, 650)), int(rng.integers(20, 36)))


def _sample_nmt(rng: np.random.Generator) -> NmtArchitecture:
    encoder, decoder = sample_rnn_cell(rng), sample_rnn_cell(rng)
    hidden = _choice(rng, (256, 384, 512))
    return NmtArchitecture(
        encoder, decoder, hidden, int(rng.integers(10, 21)), int(rng.integers(10, 21))
    )


_SAMPLERS: dict[str, Callable[[np.random.Generator], Architecture]] = {
    "cifar10": _sample_cifar10,
    "ptb": _sample_ptb,
    "nmt": _sample_nmt,
}


def _check(family: str, index: int, seed: int) -> None:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; the families are {', '.join(FAMILIES)}")
    if not 0 <= index < FAMILY_SIZE:
        raise ValueError(f"index must be in 0..{FAMILY_SIZE - 1}, got {index}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")


def sample_architecture(family: str, index: int, seed: int = 0) -> Architecture:
    """The architecture number `index` of `family` (see the module docstring). ValueError for an
    unknown family, an index outside 0..31 or a negative seed."""
    _check(family, index, seed)
    rng = np.random.default_rng([seed, index, FAMILIES.index(family)])
    return _SAMPLERS[family](rng)


# ---------------------------------------------------------------------- models
_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "tanh": jnp.tanh,
    "relu": nn.relu,
    "identity": lambda x: x,
    "sigmoid": nn.sigmoid,
}


_INIT = nn.initializers.lecun_normal()


class EnasRnnCell(nn.Module):
    """One step of a sampled RNN cell: (x [B, H], h [B, H]) -> new h [B, H]."""

    cell: RnnCell
    hidden: int

    def _weight(self, name: str) -> jax.Array:
        return self.param(name, _INIT, (self.hidden, self.hidden), jnp.float32)

    @nn.compact
    def __call__(self, x: jax.Array, h: jax.Array) -> jax.Array:
        acts = [_ACTIVATIONS[a] for a in self.cell.activations]
        bias = self.param("bias", nn.initializers.zeros, (self.hidden,), jnp.float32)
        nodes = [acts[0](x @ self._weight("x0") + h @ self._weight("h0") + bias)]
        for i, j in enumerate(self.cell.inputs, 1):
            nodes.append(acts[i](nodes[j] @ self._weight(f"w{i}")))
        return sum(nodes[i] for i in self.cell.loose_ends) / len(self.cell.loose_ends)


def _stack(steps: list[jax.Array]) -> jax.Array:
    """[B, H] per step -> [B, T, H]."""
    return jnp.concatenate([x[:, None] for x in steps], axis=1)


class PtbModel(nn.Module):
    """Tokens [B, T] -> logits [B, T, V]; the cells are unrolled over the T steps."""

    arch: PtbArchitecture

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        a = self.arch
        x = nn.Embed(a.vocab, a.hidden, name="embed")(tokens)
        cells = [EnasRnnCell(a.cell, a.hidden, name=f"layer{k}") for k in range(a.layers)]
        h = [jnp.zeros((tokens.shape[0], a.hidden), jnp.float32) for _ in cells]
        outputs = []
        for t in range(tokens.shape[1]):
            inp = x[:, t]
            for k, cell in enumerate(cells):
                h[k] = inp = cell(inp, h[k])
            outputs.append(inp)
        return nn.Dense(a.vocab, name="softmax")(_stack(outputs))


class NmtModel(nn.Module):
    """(source [B, S], target input [B, T]) -> logits [B, T, V]."""

    arch: NmtArchitecture

    @nn.compact
    def __call__(self, src: jax.Array, tgt: jax.Array) -> jax.Array:
        a = self.arch
        xs = nn.Embed(a.vocab, a.hidden, name="src_embed")(src)
        ys = nn.Embed(a.vocab, a.hidden, name="tgt_embed")(tgt)
        encoder = EnasRnnCell(a.encoder, a.hidden, name="encoder")
        h = jnp.zeros((src.shape[0], a.hidden), jnp.float32)
        states = []
        for t in range(src.shape[1]):
            h = encoder(xs[:, t], h)
            states.append(h)
        memory = _stack(states)  # [B, S, H]
        decoder = EnasRnnCell(a.decoder, a.hidden, name="decoder")
        project = self.param("attention_out", _INIT, (2 * a.hidden, a.hidden), jnp.float32)
        outputs = []
        for t in range(tgt.shape[1]):
            h = decoder(ys[:, t], h)
            weights = nn.softmax(jnp.einsum("bh,bsh->bs", h, memory))
            context = jnp.einsum("bs,bsh->bh", weights, memory)
            outputs.append(jnp.tanh(jnp.concatenate([h, context], axis=-1) @ project))
        return nn.Dense(a.vocab, name="softmax")(_stack(outputs))


class SepConv(nn.Module):
    """ReLU, depthwise k x k conv, pointwise 1x1 conv."""

    channels: int
    kernel: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k = (self.kernel, self.kernel)
        x = nn.Conv(self.channels, k, feature_group_count=self.channels, name="depthwise")(
            nn.relu(x)
        )
        return nn.Conv(self.channels, (1, 1), name="pointwise")(x)


class EnasConvCell(nn.Module):
    """A sampled convolutional cell: (x0, x1) [B, H, W, C] -> [B, H, W, C]."""

    cell: CnnCell
    channels: int

    def _op(self, name: str, x: jax.Array, scope: str) -> jax.Array:
        if name == "identity":
            return x
        if name.startswith("sep_conv"):
            return SepConv(self.channels, int(name[-1]), name=scope)(x)
        pool = nn.avg_pool if name.startswith("avg") else nn.max_pool
        return pool(x, (3, 3), padding="SAME")

    @nn.compact
    def __call__(self, x0: jax.Array, x1: jax.Array) -> jax.Array:
        nodes = [x0, x1]
        pairs = zip(self.cell.inputs, self.cell.ops, strict=True)
        for i, ((a, b), (op_a, op_b)) in enumerate(pairs, 2):
            y_a = self._op(op_a, nodes[a], f"node{i}_a")
            nodes.append(y_a + self._op(op_b, nodes[b], f"node{i}_b"))
        out = jnp.concatenate([nodes[i] for i in self.cell.loose_ends], axis=-1)
        return nn.Conv(self.channels, (1, 1), name="combine")(nn.relu(out))


class Cifar10Model(nn.Module):
    """Images [B, 32, 32, 3] -> logits [B, 10]."""

    arch: Cifar10Architecture

    @nn.compact
    def __call__(self, images: jax.Array) -> jax.Array:
        a = self.arch
        c = a.channels
        x = nn.Conv(c, (3, 3), name="stem")(images)
        for stage in range(3):
            if stage:
                c *= 2
                x = nn.Conv(c, (3, 3), strides=2, name=f"reduce{stage}")(nn.relu(x))
            prev = x
            for k in range(a.cells):
                prev, x = x, EnasConvCell(a.cell, c, name=f"cell{stage}_{k}")(prev, x)
        return nn.Dense(a.classes, name="classifier")(jnp.mean(nn.relu(x), axis=(1, 2)))


# ---------------------------------------------------------------------- training steps
@dataclasses.dataclass(frozen=True)
class _Task:
    """What a training step needs: the model, example inputs and labels, the optimizer, and
    inputs to initialise the parameters with (one time step: parameter shapes do not depend on
    the sequence length, and tracing a short model is quicker)."""

    model: nn.Module
    inputs: tuple[S, ...]
    labels: S
    optimizer: optax.GradientTransformation
    init_inputs: tuple[S, ...]


def _tokens(batch: int, steps: int) -> S:
    return S((batch, steps), jnp.int32)


def _task(arch: Architecture) -> _Task:
    if isinstance(arch, Cifar10Architecture):
        images = (S((arch.batch, arch.image, arch.image, 3), jnp.float32),)
        labels = S((arch.batch,), jnp.int32)
        return _Task(Cifar10Model(arch), images, labels, optax.sgd(0.1, momentum=0.9), images)
    if isinstance(arch, PtbArchitecture):
        tokens = _tokens(arch.batch, arch.steps)
        one = (_tokens(arch.batch, 1),)
        return _Task(PtbModel(arch), (tokens,), tokens, optax.sgd(1.0), one)
    src, tgt = _tokens(arch.batch, arch.src_steps), _tokens(arch.batch, arch.tgt_steps)
    one = (_tokens(arch.batch, 1),) * 2
    return _Task(NmtModel(arch), (src, tgt), tgt, optax.adam(1e-3), one)


def architecture_graph(arch: Architecture, *, group_target: int | None = None) -> Graph:
    """The training-step graph of `arch`, grouped down to `group_target` groups if given."""
    with precision.scope(np.float64):  # the optimizer's constants too
        return _traced_step(_task(arch), group_target)


def _traced_step(task: _Task, group_target: int | None) -> Graph:

    def step(params: Any, opt_state: Any, inputs: tuple, labels: jax.Array) -> tuple:
        def loss_fn(p: Any) -> jax.Array:
            logits = task.model.apply(p, *inputs)
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = task.optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    params = jax.eval_shape(task.model.init, jax.random.key(0), *task.init_inputs)
    opt_state = jax.eval_shape(task.optimizer.init, params)
    graph = from_jax(
        step, params, opt_state, task.inputs, task.labels, param_argnums=(0, 1), level="jaxpr"
    )
    return graph if group_target is None else group(graph, target=group_target).graph


# ---------------------------------------------------------------------- families
def family_name(family: str, index: int, seed: int = 0) -> str:
    """`family:FAMILY/INDEX`, with `:SEED` appended when seed != 0."""
    _check(family, index, seed)
    return f"family:{family}/{index}" + (f":{seed}" if seed else "")


def family_graph(
    family: str, index: int, *, seed: int = 0, group_target: int | None = None
) -> Graph:
    """The training-step graph of architecture `index` of `family` (see `sample_architecture`)."""
    return architecture_graph(sample_architecture(family, index, seed), group_target=group_target)


def family_graphs(
    family: str, split: str = "all", seed: int = 0, *, group_target: int | None = None
) -> list[tuple[str, Graph]]:
    """(name, graph) for the indices of `split` ("train": 0-23, "test": 24-31, "all"), in index
    order. ValueError for an unknown family or split."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; the splits are {', '.join(SPLITS)}")
    return [
        (
            family_name(family, i, seed),
            family_graph(family, i, seed=seed, group_target=group_target),
        )
        for i in SPLITS[split]
    ]
