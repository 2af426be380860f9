"""Grouping (coarsening): merge ops into groups that are placed as one, keeping the graph a DAG.

Host-side NumPy. `group` merges in three steps, each merge checked against the current group
graph so that the grouped graph never has a cycle:

1. co-location: ops sharing a `colocation` id >= 0 are merged where that keeps a DAG: members,
   in topological order, join the first piece of their class they can join without a cycle,
   else start a new piece. A training graph's weight and the ops that update it have the
   forward and backward pass between them, so such a class stays in several pieces, and the
   grouped graph ties them (below).
2. scope: with `scope_depth=d`, ops whose names share the first d components of their
   `/`-separated path are merged (a name with at most d components is its own scope; JAX
   transformation wrappers are ignored, so `jvp(Net)/fc` and `transpose(jvp(Net))/fc` share
   the scope `Net/fc` and a layer's backward ops join its forward ops). Members
   are added in topological order to the first piece of their scope that they can join without
   a cycle, else they start a new piece: a scope is split only where data leaves it and comes
   back. Mutually parallel ops of a scope are merged too, which serialises them (a layer's
   input and weight gradients); the zoo leaves this step out.
3. target: rounds of merges until at most `target` decisions remain (groups, those tied to one
   device counted once; see "Ties"; without co-location, groups), ranked by the group graph's
   critical path (longest path by cost) after the merge, so that parallel branches stay apart.
   Candidates are the group edges (producer into consumer) and pairs of sinks (sources) next
   to each other in start (finish) time. A merged group starts when its last producer
   finishes, so merging A and B makes the longest path through them max(start of A, start of
   B but A) + cost A + cost B + max(longest path after A but B, after B). Order: the critical
   path after the merge, then how much the merge lengthens the longest path through A and B,
   then the bytes that stop crossing (heaviest first). Path lengths are computed once a round;
   a round merges each group at most once and takes the merges that lengthen no path (chains
   collapse first) or, when there are none, merges that do for at most `ROUND_SHARE` of the
   groups. Groups with no edges between them are merged cheapest first.

Cycle check: merging groups A and B creates a cycle exactly when a third group X lies on a path
between them (A ~> X ~> B or B ~> X ~> A). The reachability of the current group graph is kept
as bit rows (one per group, indexed by a member op) and updated after every merge (only the rows
of groups that reached one of the two change), so each check is a row-column intersection:
desc(A) & anc(B) must be empty when A reaches B. Memory is N * N / 8 bytes.

Aggregation of the grouped graph: cost and param_bytes are sums over members (a group's ops run
one after another on one device); out_bytes sums the outputs of members that have a consumer
outside the group or no consumer at all (the data that leaves the group); an edge joins two
groups with an op edge between them; a group's name is its members' common name path prefix
(made unique with `_1`, `_2`, ...; a one-op group keeps its op's name); its op type is the most
common member type (the first in op order on a tie).

Ties: groups that must share a device without being one node carry one `colocation` id in the
grouped graph (-1 for a group tied to no other). Two groups are tied when they hold ops of one
co-location class, directly or through a chain of such classes (a target merge of ops of two
classes ties both). Tie ids number the tied sets by their smallest group; when no set has two
groups, the grouped graph's `colocation` is None.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

import numpy as np

from placeto_jax.graphs.core import Graph

ROUND_SHARE = 0.05  # of the groups: merges per round that lengthen a path


@dataclasses.dataclass(frozen=True, eq=False)
class Grouping:
    """The grouped graph and the map from ops to groups. Groups are numbered by smallest member
    op index; when nothing was merged, `graph` is the input graph itself."""

    graph: Graph  # the grouped graph, G ops
    op_to_group: np.ndarray  # [N] int64, group index of every op

    @property
    def n_groups(self) -> int:
        return self.graph.n_ops

    def expand(self, group_placement) -> np.ndarray:
        """Op placement [N] or [B, N] from a group placement [G] or [B, G]: every op goes to
        its group's device."""
        placement = np.asarray(group_placement)
        if placement.ndim not in (1, 2) or placement.shape[-1] != self.n_groups:
            raise ValueError(
                f"group placement must have shape [{self.n_groups}] or [B, {self.n_groups}], "
                f"got {placement.shape}"
            )
        return placement[..., self.op_to_group]


def group(
    graph: Graph,
    *,
    scope_depth: int | None = None,
    target: int | None = None,
    respect_colocation: bool = True,
) -> Grouping:
    """Coarsen `graph` (see the module docstring for the steps, the cycle check and how group
    fields are aggregated). Raises `ValueError` for a negative `scope_depth`, a `target` below 1,
    (co-location classes never raise: see "Ties")."""
    if not isinstance(graph, Graph):
        raise TypeError(f"group coarsens a placeto_jax.Graph, got {type(graph).__name__}")
    for name, value in (("scope_depth", scope_depth), ("target", target)):
        if value is not None and (
            not isinstance(value, int | np.integer) or isinstance(value, bool)
        ):
            raise TypeError(f"{name} must be an integer or None, got {value!r}")
    if scope_depth is not None and scope_depth < 0:
        raise ValueError(f"scope_depth must be >= 0, got {scope_depth}")
    if target is not None and target < 1:
        raise ValueError(f"target must be >= 1, got {target}")
    colocated = respect_colocation and graph.colocation is not None
    state = _State.of(graph, colocated)
    if colocated:
        _merge_colocated(state, graph)
    if scope_depth is not None:
        _merge_scopes(state, graph, scope_depth)
    if target is not None:
        _merge_to_target(state, graph, target)
    op_to_group = _relabel(state.slot)
    if np.array_equal(op_to_group, np.arange(graph.n_ops)):
        return Grouping(graph, op_to_group)
    ties = _ties(state, op_to_group) if colocated else None
    return Grouping(_grouped_graph(graph, op_to_group, ties), op_to_group)


# ---------------------------------------------------------------------- merge state
@dataclasses.dataclass
class _State:
    """Groups while merging (mutated in place). A group lives in the slot of one of its member
    ops; decisions are the sets of groups tied by co-location (union-find over op classes)."""

    slot: np.ndarray  # [N] int64, slot of every op's group
    members: dict[int, list[int]]  # slot -> member ops
    reach: np.ndarray  # [N, ceil(N/8)] uint8, bit b of row a: group b reachable from group a
    op_class: np.ndarray  # [N] int64 co-location class of every op (its own when none)
    tie: np.ndarray  # [C] int64 union-find parent of every class
    n_decisions: int  # distinct tie roots over the groups

    @classmethod
    def of(cls, graph: Graph, colocated: bool) -> _State:
        n = graph.n_ops
        members = {v: [v] for v in range(n)}
        op_class = graph.colocation_classes if colocated else np.arange(n, dtype=np.int64)
        n_classes = int(op_class.max()) + 1
        return cls(
            slot=np.arange(n, dtype=np.int64),
            members=members,
            reach=graph.descendants_packed.copy(),
            op_class=op_class,
            tie=np.arange(n_classes, dtype=np.int64),
            n_decisions=n_classes,
        )

    @property
    def n_groups(self) -> int:
        return len(self.members)

    def tie_root(self, op: int) -> int:
        """The root class of the decision that op belongs to."""
        c = int(self.op_class[op])
        while self.tie[c] != c:
            self.tie[c] = self.tie[self.tie[c]]
            c = int(self.tie[c])
        return c

    def _column(self, b: int) -> np.ndarray:  # [N] bool, the groups that reach group b
        return (self.reach[:, b >> 3] >> (7 - (b & 7)) & 1).astype(bool)

    def _row(self, a: int) -> np.ndarray:  # [N] bool, the groups reachable from group a
        return np.unpackbits(self.reach[a], count=self.reach.shape[0]).astype(bool)

    def can_merge(self, a: int, b: int) -> bool:
        """True when no third group lies on a path between groups a and b (only possible from
        the one that reaches the other, so at most one column is read)."""
        for x, y in ((a, b), (b, a)):
            row = self._row(x)
            if row[y] and np.any(row & self._column(y)):
                return False
        return True

    def merge(self, a: int, b: int) -> int:
        """Merge groups a and b (a safe merge) into the slot of the larger; return that slot."""
        keep, gone = (a, b) if len(self.members[a]) >= len(self.members[b]) else (b, a)
        changed = np.flatnonzero(self._column(keep) ^ self._column(gone))  # reach one of two
        row = self.reach[keep] | self.reach[gone]
        row[gone >> 3] &= ~np.uint8(1 << (7 - (gone & 7)))
        row[keep >> 3] &= ~np.uint8(1 << (7 - (keep & 7)))
        self.reach[changed] |= row
        self.reach[changed, keep >> 3] |= np.uint8(1 << (7 - (keep & 7)))
        self.reach[:, gone >> 3] &= ~np.uint8(1 << (7 - (gone & 7)))
        self.reach[keep] = row
        self.reach[gone] = 0
        a, b = self.tie_root(keep), self.tie_root(gone)
        if a != b:
            self.tie[max(a, b)] = min(a, b)
            self.n_decisions -= 1
        moved = self.members.pop(gone)
        self.members[keep].extend(moved)
        self.slot[moved] = keep
        return keep


# ---------------------------------------------------------------------- the three steps
def _merge_colocated(state: _State, graph: Graph) -> None:
    """Merge each co-location class into as few pieces as keep the graph a DAG: members in
    topological order, each joining the first piece it can join."""
    order = graph.topological_order
    ids = graph.colocation[order]
    for cid in np.unique(ids[ids >= 0]):
        pieces: list[int] = []
        for v in order[ids == cid].tolist():
            _join_a_piece(state, pieces, v)


def _join_a_piece(state: _State, pieces: list[int], v: int) -> None:
    """Merge op v's group into the first of `pieces` (one op of each) it can join without a
    cycle; when it can join none, v starts a new piece (appended to `pieces`)."""
    own = int(state.slot[v])
    slots = [int(state.slot[p]) for p in pieces]
    if own in slots:
        return
    joined = next((s for s in slots if state.can_merge(s, own)), None)
    if joined is None:
        pieces.append(v)
    else:
        state.merge(joined, own)


_TRANSFORM = re.compile(r"^[A-Za-z_]\w*\((.*)\)$")  # e.g. transpose(jvp(Block))


def _scope(name: str, depth: int) -> str:
    """The first `depth` components of a `/`-separated name (the whole name when shorter), with
    JAX transformation wrappers removed from each (`transpose(jvp(Block))` -> `Block`), so that
    an op's forward and backward pass share its module's scope."""
    parts = []
    for part in name.split("/")[:depth]:
        while match := _TRANSFORM.match(part):
            part = match.group(1)
        parts.append(part)
    return "/".join(parts)


def _merge_scopes(state: _State, graph: Graph, depth: int) -> None:
    """Merge ops by scope; a member that cannot join a piece of its scope starts a new one."""
    pieces: dict[str, list[int]] = {}
    for v in graph.topological_order.tolist():
        _join_a_piece(state, pieces.setdefault(_scope(graph.names[v], depth), []), v)


def _merge_to_target(state: _State, graph: Graph, target: int) -> None:
    """Rounds of merges, best first (`_candidates`), then cheapest-first pairing once no group
    edges are left. Path lengths are computed once a round, so a round takes the merges that
    lengthen no path through their groups, and only when there are none, merges that do: at most
    `ROUND_SHARE` of the groups (at least one), as they use up the slack the others were ranked
    by."""
    while state.n_decisions > target:
        pairs, longer = _candidates(state, graph)
        if pairs.size == 0:
            _pair_cheapest(state, graph, target)
            return
        if not _merge_round(state, pairs[~longer], target, state.n_groups):
            _merge_round(state, pairs[longer], target, max(1, int(ROUND_SHARE * state.n_groups)))


def _merge_round(state: _State, pairs: np.ndarray, target: int, limit: int) -> int:
    """Merge safe `pairs` in order, each group at most once, until `limit` merges or `target`
    groups; return the number of merges."""
    used: set[int] = set()
    for a, b in pairs.tolist():
        if len(used) == 2 * limit or state.n_decisions <= target:
            break
        if a not in used and b not in used and state.can_merge(a, b):
            used.update((a, b))
            state.merge(a, b)
    return len(used) // 2


def _candidates(state: _State, graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """[K, 2] int64 candidate merges (slots), best first, and [K] bool: the merge lengthens
    the longest path through its two groups. Candidates are the group edges and the pairs of
    sinks (sources) next to each other in order of start (finish) time. Order: the critical
    path after the merge (its longest path through the merged group, or the current critical
    path when that is longer), then how much the merge lengthens the longest path through the
    two groups, then the bytes that stop crossing (heaviest first)."""
    slots = np.array(sorted(state.members), dtype=np.int64)
    n = len(slots)
    group_of = np.searchsorted(slots, state.slot)  # [N] group index 0..n-1 of every op
    src, dst = group_of[graph.edges[:, 0]], group_of[graph.edges[:, 1]]
    crossing = src != dst
    if not crossing.any():
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=bool)
    sends = np.unique(np.stack([graph.edges[crossing, 0], dst[crossing]], axis=1), axis=0)
    edges, inverse = np.unique(
        np.stack([group_of[sends[:, 0]], sends[:, 1]], axis=1), axis=0, return_inverse=True
    )
    cost = np.bincount(group_of, weights=graph.cost, minlength=n)
    finish, rest = _levels(edges, cost, n)
    a, b = edges[:, 0], edges[:, 1]
    wait, wait_but = _max_but(b, a, finish[a], n)  # start: the last producer's finish
    tail, tail_but = _max_but(a, b, rest[b], n)  # longest path after the group
    length = np.maximum(wait[a], wait_but(b, a)) + cost[a] + cost[b]
    length += np.maximum(tail_but(a, b), tail[b])
    pairs = [edges]
    lengths = [length]
    growth = [length - np.maximum(finish[a] + tail[a], finish[b] + tail[b])]
    weights = [np.bincount(inverse.ravel(), weights=graph.out_bytes[sends[:, 0]])]
    sinks = np.flatnonzero(np.bincount(a, minlength=n) == 0)
    sources = np.flatnonzero(np.bincount(b, minlength=n) == 0)
    for ends, key in ((sinks, wait), (sources, tail)):
        ends = ends[np.argsort(key[ends], kind="stable")]
        u, v = ends[:-1], ends[1:]
        length = np.maximum(key[u], key[v]) + cost[u] + cost[v]
        pairs.append(np.stack([u, v], axis=1))
        lengths.append(length)
        growth.append(length - np.maximum(key[u] + cost[u], key[v] + cost[v]))
        weights.append(np.zeros(len(u)))
    critical = finish.max()
    longer = np.concatenate(growth) > 1e-9 * critical  # not rounding error
    pairs_all = np.concatenate(pairs)
    order = np.lexsort(
        (
            pairs_all[:, 1],
            pairs_all[:, 0],
            -np.concatenate(weights),
            np.where(longer, np.concatenate(growth), 0.0),
            np.maximum(np.concatenate(lengths), critical),
        )
    )
    return slots[pairs_all[order]], longer[order]


def _levels(edges: np.ndarray, cost: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """[n] float64 µs each, per group of the group graph given by `edges` and `cost`: the
    longest path ending with the group (its finish time with unlimited devices and free
    transfers) and the longest path starting with it (both include the group's cost)."""
    children: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges.tolist():
        children[u].append(v)
    indegree = np.bincount(edges[:, 1], minlength=n).tolist()
    weight = cost.tolist()
    finish = [0.0] * n
    order = [v for v in range(n) if indegree[v] == 0]  # grows while visited (Kahn)
    for u in order:
        finish[u] += weight[u]
        for v in children[u]:
            finish[v] = max(finish[v], finish[u])
            indegree[v] -= 1
            if indegree[v] == 0:
                order.append(v)
    rest = [0.0] * n
    for u in reversed(order):
        rest[u] = weight[u] + max((rest[v] for v in children[u]), default=0.0)
    return np.array(finish), np.array(rest)


def _max_but(keys: np.ndarray, others: np.ndarray, values: np.ndarray, n: int):
    """The largest of `values` per key ([n], 0.0 for none) and a function (key, other) -> the
    largest per key over the entries whose other end is not `other` (one entry per pair)."""
    first = np.zeros(n)
    np.maximum.at(first, keys, values)
    at_first = np.flatnonzero(values == first[keys])
    best = at_first[np.unique(keys[at_first], return_index=True)[1]]
    best_other = np.full(n, -1, dtype=np.int64)
    best_other[keys[best]] = others[best]
    rest = np.ones(len(keys), dtype=bool)
    rest[best] = False
    second = np.zeros(n)
    np.maximum.at(second, keys[rest], values[rest])

    def but(key: np.ndarray, other: np.ndarray) -> np.ndarray:
        return np.where(best_other[key] == other, second[key], first[key])

    return first, but


def _pair_cheapest(state: _State, graph: Graph, target: int) -> None:
    """With no edges between groups every merge is safe: merge the cheapest two, repeatedly."""
    while state.n_decisions > target:
        slots = sorted(state.members, key=lambda s: (graph.cost[state.members[s]].sum(), s))
        state.merge(slots[0], slots[1])


# ---------------------------------------------------------------------- the grouped graph
def _relabel(slot: np.ndarray) -> np.ndarray:
    """[N] int64 group indices, numbered by each group's smallest op index."""
    _, first, inverse = np.unique(slot, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))
    return rank[inverse.ravel()].astype(np.int64)


def _ties(state: _State, op_to_group: np.ndarray) -> np.ndarray | None:
    """[G] int64 tie id per group (-1: tied to no other group), or None when nothing is tied:
    groups whose ops' classes the merges joined (`_State.tie`) are tied."""
    n_groups = int(op_to_group.max()) + 1
    roots = np.zeros(n_groups, dtype=np.int64)
    roots[op_to_group] = [state.tie_root(v) for v in range(op_to_group.size)]
    size = np.bincount(roots, minlength=state.tie.size)
    tied = size[roots] > 1
    if not tied.any():
        return None
    ids = np.full(n_groups, -1, dtype=np.int64)
    ids[tied] = np.unique(roots[tied], return_inverse=True)[1].ravel()
    return ids


def _grouped_graph(graph: Graph, op_to_group: np.ndarray, ties: np.ndarray | None) -> Graph:
    n_groups = int(op_to_group.max()) + 1
    src, dst = op_to_group[graph.edges[:, 0]], op_to_group[graph.edges[:, 1]]
    crossing = src != dst
    leaves = np.zeros(graph.n_ops, dtype=bool)
    leaves[graph.edges[crossing, 0]] = True
    leaves |= graph.out_degree == 0
    members = [np.flatnonzero(op_to_group == g) for g in range(n_groups)]
    op_types = None
    if graph.op_types is not None:
        op_types = [_most_common([graph.op_types[v] for v in ops]) for ops in members]
    return Graph.from_edges(
        cost=np.bincount(op_to_group, weights=graph.cost, minlength=n_groups),
        out_bytes=np.bincount(
            op_to_group, weights=np.where(leaves, graph.out_bytes, 0.0), minlength=n_groups
        ),
        edges=np.stack([src[crossing], dst[crossing]], axis=1),
        param_bytes=np.bincount(op_to_group, weights=graph.param_bytes, minlength=n_groups),
        names=_unique([_common_prefix([graph.names[v] for v in ops]) for ops in members]),
        op_types=op_types,
        colocation=ties,
        costs_for=graph.costs_for,
        kernels=np.bincount(op_to_group, weights=graph.kernel_counts, minlength=n_groups).astype(
            np.int64
        ),
    )


def _most_common(values: list[str]) -> str:
    return Counter(values).most_common(1)[0][0]


def _common_prefix(names: list[str]) -> str:
    """The longest common `/`-component prefix of `names`, transformation wrappers removed
    ("group" when they share none)."""
    if len(names) == 1:
        return names[0]
    paths = [_scope(name, len(name)).split("/") for name in names]
    common: list[str] = []
    for parts in zip(*paths, strict=False):
        if any(p != parts[0] for p in parts):
            break
        common.append(parts[0])
    return "/".join(common) or "group"


def _unique(names: list[str]) -> list[str]:
    """Append `_1`, `_2`, ... to repeated names, in order."""
    used: set[str] = set()
    out = []
    for name in names:
        unique, k = name, 0
        while unique in used:
            k += 1
            unique = f"{name}_{k}"
        used.add(unique)
        out.append(unique)
    return out
