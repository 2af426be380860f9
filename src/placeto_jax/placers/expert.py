"""Human-expert placements: per-model naming rules for the zoo, and benchmark files' own splits.

Rules read the Flax module path in op names (`zoo:<model>/...`); each matching op gets a device,
and every other op (backward and optimizer ops, glue) follows its neighbours: in topological
order an unassigned op takes the device of its parent with the largest output (the activation or
gradient it consumes), then remaining roots (parameters, inputs) take the device of their first
assigned consumer. This is how practitioners write model-parallel code: a layer's forward,
backward and update ops live with the layer's weights.

Rules (D devices):
* nmt, gnmt: LSTM layer k of the encoder and of the decoder (`enc<k>`, `dec<k>`) on device
  k mod D; attention with decoder layer 0, softmax/logits on device D - 1 (Wu et al. 2016,
  Sutskever et al. 2014).
* inception_v3: the branches of each Inception module (`b1x1`, `b5x5`, `b3x3dbl`, `b3x3`,
  `b7x7dbl`, `b7x7x3`, `b7x7`, `pool`) round-robin over the devices; stem on 0, head on D - 1.
* resnet50: contiguous blocks, stage s (1-4) on device floor((s - 1) D / 4); stem on 0, head on
  D - 1.
* bert_base, transformer: contiguous layer blocks, layer i of L on device floor(i D / L);
  embeddings on 0, final norm / MLM head on D - 1.
* nasnet: contiguous blocks of the cell sequence (stem cells, cells, reduction cells in network
  order).

A graph whose op names come from no zoo model (a family graph, a user's traced function) is
refused: no rule says how its model would be split by hand. The zoo's grouped graphs merge each
top-level module's ops into groups named by their common prefix, so many groups keep no layer
name; when no op of a zoo graph matches its model's rules, the placement is `blocks`:
contiguous, compute-balanced blocks of the topological order (the generic "pipeline" split).
"""

from __future__ import annotations

import os
import re

import jax
import numpy as np

from placeto_jax.cluster import Cluster
from placeto_jax.graphs.benchmark import BenchmarkGraph, load_expert_split
from placeto_jax.graphs.core import Graph
from placeto_jax.placers.base import Solution
from placeto_jax.placers.simple import colocate

_MODEL = re.compile(r"^zoo:([a-z0-9_]+)")
_INCEPTION_BRANCHES = ("b1x1", "b5x5", "b3x3dbl", "b3x3", "b7x7dbl", "b7x7x3", "b7x7", "pool")


def expert(graph: Graph, cluster: Cluster, key: jax.Array, budget: int | None) -> Solution:
    """The expert placement of a zoo graph (see the module docstring); ValueError on a graph
    whose op names come from no model with rules."""
    del key, budget
    if not _rules_for(graph.names):
        raise ValueError(
            "expert: no naming rules know this graph (its op names do not start with zoo:MODEL/ "
            f"for a model with rules: {', '.join(sorted(_RULES))}); m-topo places contiguous "
            "blocks of the topological order"
        )
    return Solution(expert_placement(graph, cluster.n_devices))


def _rules_for(names: tuple[str, ...]):
    """The naming rules of the zoo model the op names come from, or None."""
    model = next((m.group(1) for m in map(_MODEL.match, names) if m), None)
    return _RULES.get(model)


def expert_placement(graph: Graph, n_devices: int) -> np.ndarray:
    """[N] int64: rule-tagged ops where the model's rules match, the rest by propagation."""
    tagged = tag_devices(graph.names, n_devices)
    if (tagged < 0).all():
        return blocks(graph, n_devices)
    return colocate(graph, propagate(graph, tagged))


def tag_devices(names: tuple[str, ...], n_devices: int) -> np.ndarray:
    """[N] int64: the device the model's naming rules give each op, -1 where none applies."""
    rule = _rules_for(names)
    if rule is None:
        return np.full(len(names), -1, dtype=np.int64)
    return np.asarray(rule(names, n_devices), dtype=np.int64)


def propagate(graph: Graph, placement: np.ndarray) -> np.ndarray:
    """[N] int64: ops at -1 take the device of their parent with the largest output (in
    topological order), then of their first placed child (reverse order); device 0 if isolated."""
    out = placement.copy()
    order = graph.topological_order.tolist()
    for _ in range(2):  # a root placed from its child can then place its other descendants
        for v in order:
            parents = graph.parents(v)
            parents = parents[out[parents] >= 0]
            if out[v] < 0 and parents.size:
                out[v] = out[parents[np.argmax(graph.out_bytes[parents])]]
        for v in reversed(order):
            children = graph.children(v)
            children = children[out[children] >= 0]
            if out[v] < 0 and children.size:
                out[v] = out[children[0]]
    out[out < 0] = 0
    return out


def from_split_file(
    path: str | os.PathLike, benchmark: BenchmarkGraph, n_devices: int
) -> np.ndarray:
    """[N] int64: a benchmark file's expert split (`load_expert_split`); accelerator k goes to
    device k mod `n_devices` when the split uses more accelerators than there are devices."""
    return load_expert_split(path, benchmark) % n_devices


# ---------------------------------------------------------------------- per-model rules
def _seq2seq(names: tuple[str, ...], n_devices: int) -> list[int]:
    def device(name: str) -> int:
        if re.search(r"/(softmax|logits)", name):
            return n_devices - 1
        if re.search(r"/attention", name):
            return 0
        layer = re.search(r"/(?:enc|dec)(\d+)", name)
        return int(layer.group(1)) % n_devices if layer else -1

    return [device(name) for name in names]


def _inception(names: tuple[str, ...], n_devices: int) -> list[int]:
    def device(name: str) -> int:
        if "/head" in name:
            return n_devices - 1
        if re.search(r"/mixed_\d[a-e]/", name):
            for i, branch in enumerate(_INCEPTION_BRANCHES):
                if f"/{branch}" in name:
                    return i % n_devices
            return -1
        return 0 if re.search(r"InceptionV3\)?/(conv|stem)", name) else -1

    return [device(name) for name in names]


def _resnet(names: tuple[str, ...], n_devices: int) -> list[int]:
    def device(name: str) -> int:
        if "/head" in name:
            return n_devices - 1
        stage = re.search(r"/stage(\d)", name)
        if stage:
            return (int(stage.group(1)) - 1) * n_devices // 4
        return 0 if re.search(r"ResNet\)?/(conv|stem)", name) else -1

    return [device(name) for name in names]


def _layers(names: tuple[str, ...], n_devices: int) -> list[int]:
    found = [re.search(r"/layer(\d+)", name) for name in names]
    n_layers = 1 + max((int(m.group(1)) for m in found if m), default=0)

    def device(name: str, layer) -> int:
        if layer:
            return int(layer.group(1)) * n_devices // n_layers
        if re.search(r"/(embed|positions|segments|ln_embed)", name):
            return 0
        return n_devices - 1 if re.search(r"/(ln_final|mlm_)", name) else -1

    return [device(name, layer) for name, layer in zip(names, found, strict=True)]


def _nasnet(names: tuple[str, ...], n_devices: int) -> list[int]:
    cells = [re.search(r"/(stem_cell\d+|reduction\d+|cell\d+_\d+)", name) for name in names]
    sequence = list(dict.fromkeys(m.group(1) for m in cells if m))  # first-seen network order
    index = {cell: i for i, cell in enumerate(sequence)}
    return [index[m.group(1)] * n_devices // len(sequence) if m else -1 for m in cells]


_RULES = {
    "nmt": _seq2seq,
    "gnmt": _seq2seq,
    "inception_v3": _inception,
    "resnet50": _resnet,
    "bert_base": _layers,
    "transformer": _layers,
    "nasnet": _nasnet,
}


def blocks(graph: Graph, n_devices: int) -> np.ndarray:
    """[N] int64: the topological order cut into `n_devices` blocks of about equal compute (each
    co-location class on its first op's device): the expert's placement of a zoo graph whose
    ops match none of its rules, and a generic split any graph can be given."""
    order = graph.topological_order
    done = np.cumsum(graph.cost[order]) - graph.cost[order]  # compute before each op
    total = max(graph.cost.sum(), np.finfo(float).tiny)
    placement = np.empty(graph.n_ops, dtype=np.int64)
    placement[order] = np.minimum((done / total * n_devices).astype(np.int64), n_devices - 1)
    return colocate(graph, placement)
