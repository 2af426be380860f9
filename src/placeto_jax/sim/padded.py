"""Host-side (NumPy) padding of a Graph into the fixed-shape arrays the JAX simulator consumes.

Shapes are rounded up to powers of two (buckets), so that graphs of similar size share one
compiled program. Padding ops have zero cost and size, no edges and are never scheduled.

The simulator scans, at each step, only the heads of a *chain cover* of the DAG: a set of W
chains (sequences of ops, each an ancestor of the next) that together hold every op. An op can
only start once its ancestors have, so every op that is ready but not started is the first
unstarted op of its chain; scanning W heads instead of N ops makes a step O(W) where W is close
to the graph's width (its largest set of mutually unordered ops, by Dilworth's theorem the
smallest possible W), which for real networks is far below N. The chain count is padded to a
multiple of 8, the other sizes to powers of two.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from placeto_jax.graphs.core import Graph


@dataclasses.dataclass(frozen=True)
class PaddedGraph:
    """One graph in padded arrays. Array fields are NumPy; `to_device` makes them JAX arrays."""

    n_ops: np.ndarray  # [] int32, real ops (ops >= n_ops are padding)
    cost: np.ndarray  # [Np] float µs
    out_bytes: np.ndarray  # [Np] float bytes
    param_bytes: np.ndarray  # [Np] float bytes
    inner_kernels: np.ndarray  # [Np] float, kernels an op runs after its first (0: one or none)
    n_parents: np.ndarray  # [Np] int32
    children: np.ndarray  # [Np, K] int32 consumer indices first, then Np (absent)
    chain_heads: np.ndarray  # [W] int32 first op of each chain, -1 for padding chains
    chain_next: np.ndarray  # [Np] int32 next op on the same chain, -1 at a chain's end
    chain_of: np.ndarray  # [Np] int32 chain holding each op (0 for padding ops)
    edge_src: np.ndarray  # [Ep] int32 producer, Np for padding edges
    edge_dst: np.ndarray  # [Ep] int32 consumer, 0 for padding edges

    @property
    def n_pad(self) -> int:
        return int(self.cost.shape[0])

    @property
    def width(self) -> int:
        return int(self.chain_heads.shape[0])


def bucket(n: int, minimum: int = 8) -> int:
    """Smallest power of two >= max(n, minimum)."""
    return 1 << max(int(n) - 1, minimum - 1).bit_length()


def round_up(n: int, multiple: int = 8) -> int:
    """Smallest multiple of `multiple` >= max(n, 1)."""
    return -(-max(int(n), 1) // multiple) * multiple


def fine_bucket(n: int) -> int:
    """Smallest multiple of an eighth of n's power of two, and of 64, >= n: at most 1/8
    padding above 512 (706 -> 768, where `bucket` gives 1,024), and 64 for every n <= 64, so
    that small graphs share compiled programs."""
    return round_up(n, max(64, bucket(n, 1) // 8))


def pad_graph(
    graph: Graph,
    n_pad: int | None = None,
    max_children: int | None = None,
    n_chains: int | None = None,
    n_edges: int | None = None,
) -> PaddedGraph:
    """Pad `graph` to the given sizes (default: power-of-two buckets of its own sizes)."""
    n = graph.n_ops
    chains = chain_cover(graph)
    degree = int(graph.out_degree.max(initial=0))
    n_pad = bucket(n) if n_pad is None else n_pad
    max_children = bucket(max(degree, 1), 1) if max_children is None else max_children
    n_chains = round_up(len(chains)) if n_chains is None else n_chains
    n_edges = bucket(max(graph.n_edges, 1), 1) if n_edges is None else n_edges
    for label, have, need in (
        ("n_pad", n_pad, n),
        ("max_children", max_children, degree),
        ("n_chains", n_chains, len(chains)),
        ("n_edges", n_edges, graph.n_edges),
    ):
        if have < need:
            raise ValueError(f"{label}={have} is too small for this graph (needs {need})")

    def padded(values: np.ndarray, fill, dtype) -> np.ndarray:
        out = np.full(n_pad, fill, dtype=dtype)
        out[:n] = values
        return out

    children = np.full((n_pad, max_children), n_pad, dtype=np.int32)
    for v in range(n):
        kids = graph.children(v)
        children[v, : kids.size] = kids
    heads = np.full(n_chains, -1, dtype=np.int32)
    chain_next = np.full(n_pad, -1, dtype=np.int32)
    chain_of = np.zeros(n_pad, dtype=np.int32)
    for i, chain in enumerate(chains):
        heads[i] = chain[0]
        chain_next[chain[:-1]] = chain[1:]
        chain_of[chain] = i
    edge_src = np.full(n_edges, n_pad, dtype=np.int32)
    edge_dst = np.zeros(n_edges, dtype=np.int32)
    edge_src[: graph.n_edges] = graph.edges[:, 0]
    edge_dst[: graph.n_edges] = graph.edges[:, 1]
    return PaddedGraph(
        n_ops=np.int32(n),
        cost=padded(graph.cost, 0.0, np.float64),
        out_bytes=padded(graph.out_bytes, 0.0, np.float64),
        param_bytes=padded(graph.param_bytes, 0.0, np.float64),
        inner_kernels=padded((graph.kernel_counts - 1).clip(min=0), 0.0, np.float64),
        n_parents=padded(graph.in_degree, 0, np.int32),
        children=children,
        chain_heads=heads,
        chain_next=chain_next,
        chain_of=chain_of,
        edge_src=edge_src,
        edge_dst=edge_dst,
    )


def stack_padded(graphs: list[Graph], n_pad: int | None) -> PaddedGraph:
    """`graphs` padded to one shape (each size the largest any of them needs; `n_pad` ops, or
    their power of two when None), fields stacked over the graphs: [G, ...]."""
    n_pad = n_pad or bucket(max(g.n_ops for g in graphs))
    kids = bucket(max(max(int(g.out_degree.max(initial=0)), 1) for g in graphs), 1)
    chains = round_up(max(len(chain_cover(g)) for g in graphs))
    edges = fine_bucket(max(g.n_edges for g in graphs))
    padded = [pad_graph(g, n_pad, kids, chains, edges) for g in graphs]
    return PaddedGraph(
        **{
            f.name: np.stack([np.asarray(getattr(p, f.name)) for p in padded])
            for f in dataclasses.fields(PaddedGraph)
        }
    )


def chain_cover(graph: Graph) -> list[np.ndarray]:
    """Cover the ops with the fewest chains (each op an ancestor of the next), the graph's width
    by Dilworth's theorem: a greedy cover (`greedy_chains`), then augmenting paths in the
    bipartite graph (u, v) for u an ancestor of v, where chain links are a matching and each
    augmenting path joins two chains into one. Chains are ordered by their first op's position
    in topological order."""
    n = graph.n_ops
    succ = np.full(n, -1, dtype=np.int64)  # next op on the same chain
    pred = np.full(n, -1, dtype=np.int64)  # previous op on the same chain
    for chain in greedy_chains(graph):
        succ[chain[:-1]], pred[chain[1:]] = chain[1:], chain[:-1]
    descendants = graph.descendants_packed
    while _join_two_chains(descendants, succ, pred):
        pass
    position = np.empty(n, dtype=np.int64)
    position[graph.topological_order] = np.arange(n)
    chains = []
    for head in sorted(np.flatnonzero(pred < 0), key=lambda v: position[v]):
        chain = [head]
        while succ[chain[-1]] >= 0:
            chain.append(succ[chain[-1]])
        chains.append(np.asarray(chain, dtype=np.int32))
    return chains


def _join_two_chains(descendants: np.ndarray, succ: np.ndarray, pred: np.ndarray) -> bool:
    """Find one augmenting path by a breadth-first search from every chain's last op (a link
    from u to a descendant v, then back along v's current link to its predecessor, and so on,
    until a chain's first op is reached) and relink along it: one chain fewer. False if none."""
    n = succ.shape[0]
    came_from = np.full(n, -1, dtype=np.int64)  # the op that reached v by a new link
    reached = np.zeros(n, dtype=bool)
    frontier = np.flatnonzero(succ < 0)  # last ops of chains
    visited = np.zeros(n, dtype=bool)
    visited[frontier] = True
    while frontier.size:
        below = np.unpackbits(descendants[frontier], axis=1, count=n).astype(bool)  # [F, N]
        new = np.flatnonzero(below.any(axis=0) & ~reached)
        if new.size == 0:
            return False
        came_from[new] = frontier[np.argmax(below[:, new], axis=0)]
        reached[new] = True
        firsts = new[pred[new] < 0]
        if firsts.size:
            v = firsts[0]
            while v >= 0:  # relink: u -> v replaces u's old link u -> old
                u = came_from[v]
                old = succ[u]
                succ[u], pred[v] = v, u
                v = old
            return True
        frontier = pred[new]
        frontier = frontier[~visited[frontier]]
        visited[frontier] = True
    return False


def greedy_chains(graph: Graph) -> list[np.ndarray]:
    """Cover the ops with chains greedily: visit ops in topological order and append each to the
    chain whose last op is its latest ancestor (by topological position), or start a new chain.
    O(N^2 / 8) bit operations; a few chains more than the minimum on layered graphs."""
    n = graph.n_ops
    position = np.empty(n, dtype=np.int64)
    position[graph.topological_order] = np.arange(n)
    ancestors = graph.ancestors_packed
    tails = np.empty(0, dtype=np.int64)  # last op of each chain
    chains: list[list[int]] = []
    for v in graph.topological_order:
        is_ancestor = np.unpackbits(ancestors[v], count=n).astype(bool)[tails]
        if is_ancestor.any():
            candidates = np.flatnonzero(is_ancestor)
            best = candidates[np.argmax(position[tails[candidates]])]
            tails[best] = v
            chains[best].append(int(v))
        else:
            tails = np.append(tails, v)
            chains.append([int(v)])
    return [np.asarray(chain, dtype=np.int32) for chain in chains]
