"""A zoo of training-step graphs traced from Flax Linen models (nothing is run or downloaded).

Each model's whole training step is traced with `from_jax`: forward pass, softmax cross-entropy
loss, `jax.grad`, and an optax update applied with `optax.apply_updates` (inside the named scope
`optimizer`). Parameters, optimizer state and BatchNorm statistics come from `model.init` and
`optimizer.init` under `jax.eval_shape`, so they are `ShapeDtypeStruct`s and nothing executes;
they are the resident parameters (`param_argnums`). Costs are µs on the `placeto-k80` preset.
Dropout is left out (the graphs are deterministic).

Op names start with `zoo:<name>/`, then the AD scope (`jvp(<Model>)` for the forward pass,
`transpose(jvp(<Model>))` for the backward pass), then Flax module paths. The op graph is grouped
by `group(graph, target=group_target)` alone, without merging by name scope: a scope's merge
takes every op of the scope that joins without a cycle, mutually parallel ones too (a layer's
input and weight gradients, an Inception module's branches, a cell's gates), which serialised
them (Inception-V3's parallelism 2.23 fell to 1.01 at scope depth 3 and to 1.57 at depth 4, the
conv/BatchNorm level). The target step's critical-path order instead collapses chains first and
keeps parallel branches apart (the forward convolutions of an Inception module's branches stay
in different groups); groups are uneven (1 to about 950 ops on Inception-V3), and cheap sinks
and sources (parameter updates, constants) from far apart share groups.

`zoo_graph` caches the grouped graph as a gzip graph file under `cache_dir`, else
`$PLACETO_JAX_CACHE`, else `~/.cache/placeto_jax/zoo`; the file name holds the model name and a
hash of the sizes, the group target and `VERSION` (bump it when a model, the tracer or the
grouping changes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from placeto_jax import precision
from placeto_jax.files import atomic_write
from placeto_jax.graphs.core import Graph
from placeto_jax.graphs.grouping import Grouping, group
from placeto_jax.graphs.io import load_graph, save_graph
from placeto_jax.graphs.trace import from_jax

VERSION = 6  # 2: grouping by critical path, no scope step; 3: op counts cached beside
# 4: weights co-located with their updates (from_jax colocate_params); 5: costs_for recorded;
# 6: grouped ops count their kernels (Graph.kernels)
CACHE_ENV = "PLACETO_JAX_CACHE"
DEFAULT_CACHE = Path("~/.cache/placeto_jax/zoo")

Sizes = Mapping[str, Any]
Carry = tuple[jax.Array, jax.Array]


# ---------------------------------------------------------------------- ResNet-50
class Bottleneck(nn.Module):
    """1x1, 3x3 (with the stride), 1x1 convolutions with BatchNorm; projection shortcut."""

    features: int
    strides: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = _conv_bn(x, self.features, (1, 1), 1, "conv1")
        y = _conv_bn(y, self.features, (3, 3), self.strides, "conv2")
        y = _conv_bn(y, 4 * self.features, (1, 1), 1, "conv3", relu=False)
        if x.shape[-1] != y.shape[-1] or self.strides != 1:
            x = _conv_bn(x, 4 * self.features, (1, 1), self.strides, "proj", relu=False)
        return nn.relu(x + y)


def _conv_bn(
    x: jax.Array,
    features: int,
    kernel: tuple[int, int],
    strides: int,
    name: str,
    relu: bool = True,
    padding: str = "SAME",
) -> jax.Array:
    """Convolution (no bias), BatchNorm in training mode, optional ReLU; named `name`."""
    conv = nn.Conv(features, kernel, strides, padding, use_bias=False, name=f"{name}_conv")
    x = conv(x)
    x = nn.BatchNorm(use_running_average=False, name=f"{name}_bn")(x)
    return nn.relu(x) if relu else x


class ResNet(nn.Module):
    """ResNet v1.5 with bottleneck blocks: 7x7/2 stem, max pool, four stages, average pool."""

    blocks: Sequence[int]
    width: int
    classes: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = _conv_bn(x, self.width, (7, 7), 2, "stem")
        x = nn.max_pool(x, (3, 3), (2, 2), "SAME")
        for stage, n in enumerate(self.blocks):
            for b in range(n):
                strides = 2 if stage > 0 and b == 0 else 1
                x = Bottleneck(self.width * 2**stage, strides, name=f"stage{stage + 1}_{b}")(x)
        return nn.Dense(self.classes, name="head")(x.mean(axis=(1, 2)))


# ---------------------------------------------------------------------- Inception-V3
class _Inception(nn.Module):
    """Base of the Inception modules: channel counts are divided by `width_div`."""

    width_div: int


def _scaled_conv(width_div: int) -> Callable[..., jax.Array]:
    """A conv-BN-ReLU (stride 1, SAME unless given) whose channel count is divided by
    `width_div`; a plain function, so that its ops sit directly in the calling module's scope."""

    def conv(x, features, kernel, name, strides=1, padding="SAME") -> jax.Array:
        return _conv_bn(x, max(1, features // width_div), kernel, strides, name, padding=padding)

    return conv


def _avg_pool(x: jax.Array) -> jax.Array:
    return nn.avg_pool(x, (3, 3), (1, 1), "SAME")


def _max_pool(x: jax.Array) -> jax.Array:
    return nn.max_pool(x, (3, 3), (2, 2), "VALID")


class InceptionA(_Inception):
    """35x35 module: 1x1, 5x5, double 3x3 and pool branches."""

    pool_features: int = 32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        conv = _scaled_conv(self.width_div)
        b1 = conv(x, 64, (1, 1), "b1x1")
        b5 = conv(conv(x, 48, (1, 1), "b5x5_1"), 64, (5, 5), "b5x5_2")
        b3 = conv(conv(x, 64, (1, 1), "b3x3dbl_1"), 96, (3, 3), "b3x3dbl_2")
        b3 = conv(b3, 96, (3, 3), "b3x3dbl_3")
        bp = conv(_avg_pool(x), self.pool_features, (1, 1), "pool")
        return jnp.concatenate([b1, b5, b3, bp], axis=-1)


class InceptionB(_Inception):
    """Grid reduction 35x35 -> 17x17: strided 3x3, strided double 3x3, max pool."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        conv = _scaled_conv(self.width_div)
        b3 = conv(x, 384, (3, 3), "b3x3", strides=2, padding="VALID")
        bd = conv(conv(x, 64, (1, 1), "b3x3dbl_1"), 96, (3, 3), "b3x3dbl_2")
        bd = conv(bd, 96, (3, 3), "b3x3dbl_3", strides=2, padding="VALID")
        return jnp.concatenate([b3, bd, _max_pool(x)], axis=-1)


class InceptionC(_Inception):
    """17x17 module with factorised 7x7 convolutions (1x7 and 7x1)."""

    c7: int = 128

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        conv = _scaled_conv(self.width_div)
        b1 = conv(x, 192, (1, 1), "b1x1")
        b7 = conv(x, self.c7, (1, 1), "b7x7_1")
        b7 = conv(conv(b7, self.c7, (1, 7), "b7x7_2"), 192, (7, 1), "b7x7_3")
        bd = conv(x, self.c7, (1, 1), "b7x7dbl_1")
        for i, kernel in enumerate([(7, 1), (1, 7), (7, 1)]):
            bd = conv(bd, self.c7, kernel, f"b7x7dbl_{i + 2}")
        bd = conv(bd, 192, (1, 7), "b7x7dbl_5")
        bp = conv(_avg_pool(x), 192, (1, 1), "pool")
        return jnp.concatenate([b1, b7, bd, bp], axis=-1)


class InceptionD(_Inception):
    """Grid reduction 17x17 -> 8x8: strided 3x3, 7x7 then strided 3x3, max pool."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        conv = _scaled_conv(self.width_div)
        b3 = conv(conv(x, 192, (1, 1), "b3x3_1"), 320, (3, 3), "b3x3_2", 2, "VALID")
        b7 = conv(conv(x, 192, (1, 1), "b7x7x3_1"), 192, (1, 7), "b7x7x3_2")
        b7 = conv(conv(b7, 192, (7, 1), "b7x7x3_3"), 192, (3, 3), "b7x7x3_4", 2, "VALID")
        return jnp.concatenate([b3, b7, _max_pool(x)], axis=-1)


class InceptionE(_Inception):
    """8x8 module with expanded filter banks (parallel 1x3 and 3x1 convolutions)."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        conv = _scaled_conv(self.width_div)
        b1 = conv(x, 320, (1, 1), "b1x1")
        b3 = conv(x, 384, (1, 1), "b3x3_1")
        b3 = [conv(b3, 384, (1, 3), "b3x3_2a"), conv(b3, 384, (3, 1), "b3x3_2b")]
        bd = conv(conv(x, 448, (1, 1), "b3x3dbl_1"), 384, (3, 3), "b3x3dbl_2")
        bd = [conv(bd, 384, (1, 3), "b3x3dbl_3a"), conv(bd, 384, (3, 1), "b3x3dbl_3b")]
        bp = conv(_avg_pool(x), 192, (1, 1), "pool")
        return jnp.concatenate([b1, *b3, *bd, bp], axis=-1)


class InceptionV3(_Inception):
    """Inception-V3 without the auxiliary classifier: stem, 3x A, B, 4x C, D, 2x E, head."""

    classes: int = 1000

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        conv = _scaled_conv(self.width_div)
        x = conv(x, 32, (3, 3), "stem1", strides=2, padding="VALID")
        x = conv(x, 32, (3, 3), "stem2", padding="VALID")
        x = _max_pool(conv(x, 64, (3, 3), "stem3"))
        x = conv(x, 80, (1, 1), "stem4", padding="VALID")
        x = _max_pool(conv(x, 192, (3, 3), "stem5", padding="VALID"))
        div = self.width_div
        for i, pool in enumerate([32, 64, 64]):
            x = InceptionA(div, pool, name=f"mixed_5{'bcd'[i]}")(x)
        x = InceptionB(div, name="mixed_6a")(x)
        for i, c7 in enumerate([128, 160, 160, 192]):
            x = InceptionC(div, c7, name=f"mixed_6{'bcde'[i]}")(x)
        x = InceptionD(div, name="mixed_7a")(x)
        x = InceptionE(div, name="mixed_7b")(x)
        x = InceptionE(div, name="mixed_7c")(x)
        return nn.Dense(self.classes, name="head")(x.mean(axis=(1, 2)))


# ---------------------------------------------------------------------- Transformer
class TransformerLayer(nn.Module):
    """Pre-LayerNorm self-attention and a ReLU (or GELU) feed-forward block."""

    heads: int
    ff: int
    causal: bool
    gelu: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        mask = nn.make_causal_mask(x[..., 0]) if self.causal else None
        y = nn.LayerNorm(name="ln1")(x)
        x = x + nn.MultiHeadDotProductAttention(self.heads, name="attention")(y, y, mask=mask)
        y = nn.Dense(self.ff, name="ff1")(nn.LayerNorm(name="ln2")(x))
        y = nn.gelu(y) if self.gelu else nn.relu(y)
        return x + nn.Dense(x.shape[-1], name="ff2")(y)


class TransformerLM(nn.Module):
    """Decoder-only language model: token and position embeddings, causal layers, tied output
    projection (the embedding's `attend`)."""

    layers: int
    d: int
    heads: int
    ff: int
    vocab: int

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        embed = nn.Embed(self.vocab, self.d, name="embed")
        x = embed(tokens) + _positions(tokens.shape[1], self.d)
        for i in range(self.layers):
            x = TransformerLayer(self.heads, self.ff, causal=True, name=f"layer{i}")(x)
        return embed.attend(nn.LayerNorm(name="ln_final")(x))


def _positions(length: int, d: int) -> jax.Array:
    """[1, length, d] learned position embeddings."""
    table = nn.Embed(length, d, name="positions")
    return table(jnp.arange(length))[None]


class Bert(nn.Module):
    """BERT encoder (token, segment and position embeddings, GELU layers) with the masked-LM
    head: dense, GELU, LayerNorm, projection tied to the token embedding."""

    layers: int
    d: int
    heads: int
    ff: int
    vocab: int

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        embed = nn.Embed(self.vocab, self.d, name="embed")
        segments = nn.Embed(2, self.d, name="segments")(jnp.zeros_like(tokens))
        x = nn.LayerNorm(name="ln_embed")(
            embed(tokens) + segments + _positions(tokens.shape[1], self.d)
        )
        for i in range(self.layers):
            x = TransformerLayer(self.heads, self.ff, causal=False, gelu=True, name=f"layer{i}")(x)
        y = nn.LayerNorm(name="mlm_ln")(nn.gelu(nn.Dense(self.d, name="mlm_dense")(x)))
        return embed.attend(y)


# ---------------------------------------------------------------------- NMT and GNMT
_INIT = nn.initializers.lecun_normal()


class LSTMCell(nn.Module):
    """One LSTM step written with plain matmuls (fast to trace) on the concatenated `inputs`;
    `carry` (c, h) is zeros when None. Returns the new carry and the output: h, plus `inputs[0]`
    when `residual`."""

    hidden: int
    residual: bool = False

    @nn.compact
    def __call__(self, inputs: Sequence[jax.Array], carry: Carry | None) -> tuple[Carry, jax.Array]:
        x = jnp.concatenate(inputs, axis=-1) if len(inputs) > 1 else inputs[0]
        if carry is None:
            zeros = jnp.zeros((x.shape[0], self.hidden), jnp.float32)
            carry = zeros, zeros
        c, h = carry
        n = 4 * self.hidden
        wx = self.param("wx", _INIT, (x.shape[-1], n), jnp.float32)
        wh = self.param("wh", _INIT, (self.hidden, n), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (n,), jnp.float32)
        i, f, g, o = jnp.split(x @ wx + h @ wh + bias, 4, axis=-1)
        c = nn.sigmoid(f) * c + nn.sigmoid(i) * jnp.tanh(g)
        h = nn.sigmoid(o) * jnp.tanh(c)
        return (c, h), h + inputs[0] if self.residual else h


def _cell_step(
    cell: LSTMCell, t: int, inputs: Sequence[jax.Array], carry: Carry | None
) -> tuple[Carry, jax.Array]:
    """`cell` at step `t`, in the named scope `<cell>_t<t>` (one scope per layer and step)."""
    with jax.named_scope(f"{cell.name}_t{t:02d}"):
        return cell(inputs, carry)


def _run_layer(
    cell: LSTMCell, xs: list[Sequence[jax.Array]], reverse: bool = False
) -> list[jax.Array]:
    """Unrolls `cell` over the step inputs `xs` (last to first if `reverse`): its outputs."""
    carry, outputs = None, [xs[0][0]] * len(xs)
    for t in reversed(range(len(xs))) if reverse else range(len(xs)):
        carry, outputs[t] = _cell_step(cell, t, xs[t], carry)
    return outputs


def _embed_steps(tokens: jax.Array, vocab: int, d: int, name: str) -> list[jax.Array]:
    """Embeds tokens [B, T] and splits them into T steps [B, d], all in the scope `name`."""
    with jax.named_scope(name):
        x = nn.Embed(vocab, d, name=name)(tokens)
        return [x[:, t] for t in range(tokens.shape[1])]


def _zeros_in(x: jax.Array, scope: str) -> jax.Array:
    """Zeros like `x`, made in the named scope `scope`."""
    with jax.named_scope(scope):
        return jnp.zeros_like(x)


def _stack(steps: list[jax.Array]) -> jax.Array:
    """[B, ...] per step -> [B, T, ...]."""
    return jnp.concatenate([x[:, None] for x in steps], axis=1)


def _attend(scores: jax.Array, memory: jax.Array) -> jax.Array:
    """Softmax over the source steps of scores [B, S], then the context [B, H]."""
    return jnp.einsum("bs,bsh->bh", nn.softmax(scores), memory)


class Nmt(nn.Module):
    """Placeto's NMT: an LSTM encoder and an LSTM decoder with Luong attention (general score;
    the attentional state tanh(W_c [context; h]) feeds the softmax and the next step's input)."""

    layers: int
    hidden: int
    vocab: int

    @nn.compact
    def __call__(self, tokens: tuple[jax.Array, jax.Array]) -> jax.Array:
        src, tgt = tokens
        h = self.hidden
        xs = _embed_steps(src, self.vocab, h, "src_embed")
        for k in range(self.layers):
            xs = _run_layer(LSTMCell(h, name=f"enc{k}"), [[x] for x in xs])
        w_score = self.param("attention_score", _INIT, (h, h), jnp.float32)
        w_out = self.param("attention_out", _INIT, (2 * h, h), jnp.float32)
        with jax.named_scope("attention_keys"):
            memory = _stack(xs)
            keys = memory @ w_score
        cells = [LSTMCell(h, name=f"dec{k}") for k in range(self.layers)]
        carries: list[Carry | None] = [None] * self.layers
        project = nn.Dense(self.vocab, name="softmax")
        ys = _embed_steps(tgt, self.vocab, h, "tgt_embed")
        feed, logits = _zeros_in(ys[0], "tgt_embed"), []
        for t, y in enumerate(ys):
            inputs = [y, feed]
            for k, cell in enumerate(cells):
                carries[k], x = _cell_step(cell, t, inputs, carries[k])
                inputs = [x]
            with jax.named_scope(f"attention_t{t:02d}"):
                context = _attend(jnp.einsum("bh,bsh->bs", x, keys), memory)
                feed = jnp.tanh(jnp.concatenate([context, x], axis=-1) @ w_out)
            with jax.named_scope(f"softmax_t{t:02d}"):
                logits.append(project(feed))
        with jax.named_scope("logits"):
            return _stack(logits)


class Gnmt(nn.Module):
    """GNMT-style: bidirectional first encoder layer, residual connections from the third layer
    on (encoder and decoder), Bahdanau (additive) attention queried by the bottom decoder layer
    with its context fed to every other decoder layer (and to the bottom one at the next step),
    softmax on the top decoder layer."""

    layers: int
    hidden: int
    vocab: int

    @nn.compact
    def __call__(self, tokens: tuple[jax.Array, jax.Array]) -> jax.Array:
        src, tgt = tokens
        h = self.hidden
        xs = [[x] for x in _embed_steps(src, self.vocab, h, "src_embed")]
        forward = _run_layer(LSTMCell(h, name="enc0_fw"), xs)
        backward = _run_layer(LSTMCell(h, name="enc0_bw"), xs, reverse=True)
        xs = [[f, b] for f, b in zip(forward, backward, strict=True)]
        for k in range(1, self.layers):
            xs = [[x] for x in _run_layer(LSTMCell(h, k >= 2, name=f"enc{k}"), xs)]
        w_query = self.param("attention_query", _INIT, (h, h), jnp.float32)
        v = self.param("attention_v", nn.initializers.normal(h**-0.5), (h,), jnp.float32)
        with jax.named_scope("attention_keys"):
            memory = _stack([x[0] for x in xs])
            keys = nn.Dense(h, use_bias=False, name="attention_keys")(memory)
        cells = [LSTMCell(h, k >= 2, name=f"dec{k}") for k in range(self.layers)]
        carries: list[Carry | None] = [None] * self.layers
        project = nn.Dense(self.vocab, name="softmax")
        ys = _embed_steps(tgt, self.vocab, h, "tgt_embed")
        context, logits = _zeros_in(ys[0], "tgt_embed"), []
        for t, y in enumerate(ys):
            carries[0], x = _cell_step(cells[0], t, [y, context], carries[0])
            with jax.named_scope(f"attention_t{t:02d}"):
                context = _attend(jnp.tanh(keys + (x @ w_query)[:, None]) @ v, memory)
            for k in range(1, self.layers):
                carries[k], x = _cell_step(cells[k], t, [x, context], carries[k])
            with jax.named_scope(f"softmax_t{t:02d}"):
                logits.append(project(x))
        with jax.named_scope("logits"):
            return _stack(logits)


# ---------------------------------------------------------------------- NASNet-A
CellSpec = tuple[tuple[tuple[str, int], tuple[str, int]], ...]
# The published NASNet-A cells (Zoph et al. 2018, as in TF-slim's nasnet_utils): per block, the
# (operation, input state) of its two branches, which are added. State 0 is the cell input after
# a 1x1 conv, state 1 the previous cell's output, state 2 + i block i.
NORMAL_CELL: CellSpec = (
    (("sep5x5", 0), ("sep3x3", 1)),
    (("sep5x5", 1), ("sep3x3", 1)),
    (("avg3x3", 0), ("identity", 1)),
    (("avg3x3", 1), ("avg3x3", 1)),
    (("sep3x3", 0), ("identity", 0)),
)
REDUCTION_CELL: CellSpec = (
    (("sep5x5", 0), ("sep7x7", 1)),
    (("max3x3", 0), ("sep7x7", 1)),
    (("avg3x3", 0), ("sep5x5", 1)),
    (("identity", 3), ("avg3x3", 2)),
    (("sep3x3", 2), ("max3x3", 0)),
)
NORMAL_CONCAT = (1, 2, 3, 4, 5, 6)
REDUCTION_CONCAT = (3, 4, 5, 6)


def _separable(x: jax.Array, features: int, kernel: int, strides: int, name: str) -> jax.Array:
    """NASNet's separable op, twice: ReLU, depthwise k x k (strided the first time), pointwise
    1x1, BatchNorm."""
    for i in range(2):
        channels = x.shape[-1]
        x = nn.Conv(
            channels,
            (kernel, kernel),
            strides if i == 0 else 1,
            "SAME",
            feature_group_count=channels,
            use_bias=False,
            name=f"{name}_dw{i}",
        )(nn.relu(x))
        x = nn.Conv(features, (1, 1), use_bias=False, name=f"{name}_pw{i}")(x)
        x = nn.BatchNorm(use_running_average=False, name=f"{name}_bn{i}")(x)
    return x


def _nas_op(op: str, x: jax.Array, features: int, strides: int, name: str) -> jax.Array:
    """One branch of a NASNet block: a separable conv, a 3x3 pool or the identity."""
    if op.startswith("sep"):
        return _separable(x, features, int(op[3]), strides, name)
    if op == "avg3x3":
        return nn.avg_pool(x, (3, 3), (strides, strides), "SAME")
    if op == "max3x3":
        return nn.max_pool(x, (3, 3), (strides, strides), "SAME")
    return x


def _relu_conv_bn(x: jax.Array, features: int, strides: int, name: str) -> jax.Array:
    """ReLU, then a 1x1 conv (no bias) with BatchNorm."""
    return _conv_bn(nn.relu(x), features, (1, 1), strides, name, relu=False)


class NasCell(nn.Module):
    """A NASNet-A cell on (input, previous cell's output): returns (output, input). In a
    reduction cell the branches on states 0 and 1 have stride 2."""

    filters: int
    reduction: bool

    @nn.compact
    def __call__(self, x: jax.Array, prev: jax.Array) -> tuple[jax.Array, jax.Array]:
        f = self.filters
        if prev.shape[1] != x.shape[1]:
            prev = _relu_conv_bn(prev, f, 2, "prev")
        elif prev.shape[-1] != f:
            prev = _relu_conv_bn(prev, f, 1, "prev")
        states = [_relu_conv_bn(x, f, 1, "base"), prev]
        spec, concat = (
            (REDUCTION_CELL, REDUCTION_CONCAT) if self.reduction else (NORMAL_CELL, NORMAL_CONCAT)
        )
        for i, branches in enumerate(spec):
            outs = []
            for side, (op, j) in zip(("left", "right"), branches, strict=True):
                strides = 2 if self.reduction and j < 2 else 1
                outs.append(_nas_op(op, states[j], f, strides, f"b{i}_{side}"))
            states.append(outs[0] + outs[1])
        return jnp.concatenate([states[j] for j in concat], axis=-1), x


class NasNetA(nn.Module):
    """NASNet-A (ImageNet layout, as NASNet-A Mobile): 3x3/2 stem conv, two reduction stem cells
    (filters / 4, filters / 2), three stacks of normal cells with reduction cells between them
    (filters doubling), ReLU, average pool, dense head; no auxiliary head, no drop path."""

    filters: int
    cells_per_stack: int
    classes: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = _conv_bn(x, 32, (3, 3), 2, "stem", relu=False, padding="VALID")
        prev = x
        for i, div in enumerate((4, 2)):
            x, prev = NasCell(self.filters // div, True, name=f"stem_cell{i}")(x, prev)
        for stack in range(3):
            f = self.filters * 2**stack
            if stack:
                x, prev = NasCell(f, True, name=f"reduction{stack}")(x, prev)
            for c in range(self.cells_per_stack):
                x, prev = NasCell(f, False, name=f"cell{stack}_{c}")(x, prev)
        return nn.Dense(self.classes, name="head")(nn.relu(x).mean(axis=(1, 2)))


# ---------------------------------------------------------------------- the training step
@dataclasses.dataclass(frozen=True)
class TrainStep:
    """A training step to trace: `fn(params, opt_state, state, inputs, labels)` and its example
    arguments (`ShapeDtypeStruct` pytrees); the first three are resident parameters."""

    fn: Callable
    args: tuple


PARAM_ARGNUMS = (0, 1, 2)


def train_step(
    model: nn.Module, inputs: jax.ShapeDtypeStruct, labels: jax.ShapeDtypeStruct, tx
) -> TrainStep:
    """The training step of `model` on `inputs` with integer `labels` and optimizer `tx`.
    Variables other than `params` (BatchNorm statistics) are updated and returned."""
    variables = jax.eval_shape(model.init, jax.random.key(0), inputs)
    params = variables["params"]
    state = {k: v for k, v in variables.items() if k != "params"}
    opt_state = jax.eval_shape(tx.init, params)

    def loss_fn(params, state, inputs, labels):
        logits, new_state = model.apply({"params": params, **state}, inputs, mutable=list(state))
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return loss, new_state

    def step(params, opt_state, state, inputs, labels):
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        (loss, new_state), grads = grad_fn(params, state, inputs, labels)
        with jax.named_scope("optimizer"):
            updates, opt_state = tx.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
        return params, opt_state, new_state, loss

    return TrainStep(step, (params, opt_state, state, inputs, labels))


def _spec(shape: Sequence[int], dtype=jnp.float32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


def _resnet(s: Sizes) -> TrainStep:
    model = ResNet(tuple(s["blocks"]), s["width"], s["classes"])
    images = _spec((s["batch"], s["image"], s["image"], 3))
    return train_step(model, images, _spec((s["batch"],), jnp.int32), optax.sgd(0.1, 0.9))


def _inception(s: Sizes) -> TrainStep:
    model = InceptionV3(s["width_div"], classes=s["classes"])
    images = _spec((s["batch"], s["image"], s["image"], 3))
    return train_step(model, images, _spec((s["batch"],), jnp.int32), optax.sgd(0.1, 0.9))


def _nasnet(s: Sizes) -> TrainStep:
    model = NasNetA(s["filters"], s["cells_per_stack"], s["classes"])
    images = _spec((s["batch"], s["image"], s["image"], 3))
    labels = _spec((s["batch"],), jnp.int32)
    return train_step(model, images, labels, optax.rmsprop(0.01, 0.9, 1.0, momentum=0.9))


def _lm(s: Sizes) -> TrainStep:
    model = TransformerLM(s["layers"], s["d"], s["heads"], s["ff"], s["vocab"])
    tokens = _spec((s["batch"], s["seq"]), jnp.int32)
    return train_step(model, tokens, tokens, optax.adam(1e-4))


def _bert(s: Sizes) -> TrainStep:
    model = Bert(s["layers"], s["d"], s["heads"], s["ff"], s["vocab"])
    tokens = _spec((s["batch"], s["seq"]), jnp.int32)
    return train_step(model, tokens, tokens, optax.adam(1e-4))


def _seq2seq(model_cls: type[nn.Module]) -> Callable[[Sizes], TrainStep]:
    """The builder of a seq2seq model: source and target input [B, steps], labels [B, steps]."""

    def build(s: Sizes) -> TrainStep:
        model = model_cls(s["layers"], s["hidden"], s["vocab"])
        tokens = _spec((s["batch"], s["steps"]), jnp.int32)
        return train_step(model, (tokens, tokens), tokens, optax.adam(1e-3))

    return build


# ---------------------------------------------------------------------- the zoo
@dataclasses.dataclass(frozen=True)
class ZooModel:
    """A zoo entry: a one-line description, default sizes and the step builder."""

    description: str
    sizes: Mapping[str, Any]
    build: Callable[[Sizes], TrainStep]


ZOO_MODELS: dict[str, ZooModel] = {
    "resnet50": ZooModel(
        "ResNet-50 v1.5 (bottleneck blocks [3, 4, 6, 3]), BatchNorm, SGD with momentum",
        {"batch": 32, "image": 224, "blocks": (3, 4, 6, 3), "width": 64, "classes": 1000},
        _resnet,
    ),
    "transformer": ZooModel(
        "6-layer decoder-only Transformer LM (pre-LayerNorm, tied embeddings), Adam",
        {"batch": 16, "seq": 128, "layers": 6, "d": 512, "heads": 8, "ff": 2048, "vocab": 32000},
        _lm,
    ),
    "bert_base": ZooModel(
        "BERT-base encoder with the masked-LM head (loss on every position), Adam",
        {"batch": 16, "seq": 128, "layers": 12, "d": 768, "heads": 12, "ff": 3072, "vocab": 30522},
        _bert,
    ),
    "inception_v3": ZooModel(
        "Inception-V3 (stem, 3x A, B, 4x C, D, 2x E, head; no auxiliary head), SGD with momentum",
        {"batch": 64, "image": 299, "width_div": 1, "classes": 1000},
        _inception,
    ),
    "nmt": ZooModel(
        "NMT: 2-layer LSTM encoder and decoder, Luong attention, 30 steps unrolled, Adam",
        {"batch": 128, "steps": 30, "layers": 2, "hidden": 1024, "vocab": 32000},
        _seq2seq(Nmt),
    ),
    "gnmt": ZooModel(
        "GNMT-style 4+4-layer LSTM seq2seq (bidirectional, residual), Bahdanau attention, Adam",
        {"batch": 128, "steps": 30, "layers": 4, "hidden": 1024, "vocab": 32000},
        _seq2seq(Gnmt),
    ),
    "nasnet": ZooModel(
        "NASNet-A Mobile (ImageNet 224, 4 normal cells per stack, 44 filters), RMSProp",
        {"batch": 32, "image": 224, "filters": 44, "cells_per_stack": 4, "classes": 1000},
        _nasnet,
    ),
}


def zoo_op_graph(
    name: str, *, group_target: int = 500, sizes: Sizes | None = None
) -> tuple[Graph, Grouping]:
    """The ungrouped op graph of zoo model `name` and its grouping (never cached). `sizes`
    overrides some default sizes. Raises ValueError for an unknown name or size."""
    full = _sizes(name, sizes)
    with precision.scope(np.float64):  # the same graph whoever builds it (as families.py)
        step = ZOO_MODELS[name].build(full)
        graph = from_jax(
            step.fn, *step.args, param_argnums=PARAM_ARGNUMS, name=f"zoo:{name}", level="jaxpr"
        )
    return graph, group(graph, target=group_target)


def zoo_graph(
    name: str,
    *,
    group_target: int = 500,
    cache_dir: str | os.PathLike | None = None,
    sizes: Sizes | None = None,
) -> Graph:
    """The grouped training graph of zoo model `name`, read from the cache when there (see the
    module docstring). Raises ValueError for an unknown name or size."""
    path = cache_path(name, group_target=group_target, cache_dir=cache_dir, sizes=sizes)
    if path.is_file():
        return load_graph(path)
    ops, grouping = zoo_op_graph(name, group_target=group_target, sizes=sizes)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(_meta_path(path)) as f:
        f.write(json.dumps({"ops": ops.n_ops, "edges": ops.n_edges}).encode())
    save_graph(grouping.graph, path)
    return grouping.graph


def zoo_op_count(
    name: str,
    *,
    group_target: int = 500,
    cache_dir: str | os.PathLike | None = None,
    sizes: Sizes | None = None,
) -> int | None:
    """Ops of zoo model `name` before grouping, from the cache; None if it is not built yet."""
    path = cache_path(name, group_target=group_target, cache_dir=cache_dir, sizes=sizes)
    meta = _meta_path(path)
    try:
        return int(json.loads(meta.read_text())["ops"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _meta_path(graph_path: Path) -> Path:
    return graph_path.with_name(graph_path.name.removesuffix(".json.gz") + ".ops.json")


def cache_path(
    name: str,
    *,
    group_target: int = 500,
    cache_dir: str | os.PathLike | None = None,
    sizes: Sizes | None = None,
) -> Path:
    """The cache file of zoo model `name` with these sizes and group target."""
    key = {"name": name, "sizes": _sizes(name, sizes), "target": group_target, "v": VERSION}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    root = cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE
    return Path(root).expanduser() / f"{name}-{digest}.json.gz"


def _sizes(name: str, overrides: Sizes | None) -> dict[str, Any]:
    """The default sizes of `name` updated by `overrides`; ValueError for unknown keys."""
    if name not in ZOO_MODELS:
        raise ValueError(f"unknown zoo model {name!r}; available: {', '.join(ZOO_MODELS)}")
    defaults = ZOO_MODELS[name].sizes
    unknown = sorted(set(overrides or {}) - set(defaults))
    if unknown:
        raise ValueError(f"unknown sizes {unknown} for zoo model {name!r}; known: {list(defaults)}")
    return {**defaults, **(overrides or {})}
