"""The computation graph: ops with costs and sizes, data-dependency edges, validation, order.

Host-side NumPy only. A `Graph` is immutable; derived structures (topological order, adjacency,
reachability) are computed on first use and cached on the instance.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Sequence

import numpy as np

MAX_OPS = 1_000_000  # the largest graph accepted (the simulator pads it to a power of two)
MAX_COST_US = 1e12  # µs (about 11.6 days): the largest op cost accepted
MAX_KERNELS = 1_000_000  # kernels one op may run back to back
MEASURED = "measured on "  # costs_for of measured costs: "measured on cpu", ...
MAX_BYTES = 1e18  # bytes (1 EB): the largest output or parameter size accepted


@dataclasses.dataclass(frozen=True, eq=False)
class Graph:
    """A DAG of N ops. Build one with `Graph.from_edges`, which validates its input.

    Units: microseconds for time, bytes for sizes (float64 so that profiled fractions survive).
    """

    cost: np.ndarray  # [N] float64 µs, compute time on a device of speed 1.0
    out_bytes: np.ndarray  # [N] float64 bytes, size of the op's output tensor
    param_bytes: np.ndarray  # [N] float64 bytes, resident on the op's device for the whole step
    edges: np.ndarray  # [E, 2] int64 (producer, consumer), unique, sorted
    names: tuple[str, ...]  # [N] unique op names
    op_types: tuple[str, ...] | None = None  # [N] e.g. "dot_general", optional
    colocation: np.ndarray | None = (
        None  # [N] int64 group id (ops sharing one are co-located), -1 none
    )
    costs_for: tuple[str, float] | None = None  # (preset, its speed) the costs were priced for
    kernels: np.ndarray | None = None  # [N] int64 kernels each op runs back to back (None: 1
    # per op of nonzero cost); a grouped op holds its members' kernels

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_edges(
        cls,
        cost: Sequence[float] | np.ndarray,
        out_bytes: Sequence[float] | np.ndarray,
        edges: Sequence[Sequence[int | str]] | np.ndarray,
        param_bytes: Sequence[float] | np.ndarray | None = None,
        names: Sequence[str] | None = None,
        op_types: Sequence[str] | None = None,
        colocation: Sequence[int] | np.ndarray | None = None,
        costs_for: tuple[str, float] | None = None,
        kernels: Sequence[int] | np.ndarray | None = None,
    ) -> Graph:
        """Validate and build a graph. Edges are (producer, consumer) pairs of op indices, or of
        op names when `names` is given. Duplicate edges are merged. Raises `ValueError` naming the
        problem: bad lengths, negative or non-finite numbers, edges to missing ops, self-loops,
        cycles (with the ops on one cycle). `costs_for` records where the costs come from:
        (cluster preset, its speed); costs are always µs on a device of speed 1.0, so a graph
        priced on a preset of speed s holds that device's times x s (docs/graphs.md).
        `kernels` counts the kernels each op runs back to back, `delta1` apart (a grouped op:
        its members'); an op has at least one exactly when its cost is nonzero."""
        cost_arr = _vector("cost", cost, limit=MAX_COST_US)
        n = cost_arr.shape[0]
        if n == 0:
            raise ValueError("a graph needs at least one op; cost is empty")
        if n > MAX_OPS:
            raise ValueError(f"a graph may have at most {MAX_OPS:,} ops, got {n:,}")
        out_arr = _vector("out_bytes", out_bytes, n, limit=MAX_BYTES)
        params = np.zeros(n) if param_bytes is None else param_bytes
        param_arr = _vector("param_bytes", params, n, limit=MAX_BYTES)
        name_tuple = _names(names, n)
        edge_arr = _edges(edges, n, name_tuple if names is not None else None)
        types = None
        if op_types is not None:
            types = tuple(str(t) for t in op_types)
            if len(types) != n:
                raise ValueError(f"op_types has {len(types)} entries, expected {n} (one per op)")
        coloc = None
        if colocation is not None:
            coloc = np.asarray(colocation)
            if coloc.shape != (n,) or not np.issubdtype(coloc.dtype, np.integer):
                raise ValueError(f"colocation must be {n} integers (group id, -1 for none)")
            below = np.flatnonzero(coloc < -1)
            if below.size:
                v = int(below[0])
                raise ValueError(
                    f"colocation of op {v} is {int(coloc[v])}: a group id >= 0, or -1 for none"
                )
            coloc = coloc.astype(np.int64)
        graph = cls(
            cost_arr, out_arr, param_arr, edge_arr, name_tuple, types, coloc,
            _costs_for(costs_for), _kernels(kernels, cost_arr),
        )  # fmt: skip
        graph.topological_order  # noqa: B018  (raises on a cycle)
        return graph

    def check_has_compute(self, name: str) -> None:
        """ValueError naming `name` when no op costs anything: every placement then takes 0 µs,
        and there is nothing to place or learn."""
        if not np.any(self.cost > 0):
            raise ValueError(
                f"{name} has no compute: every op costs 0 µs, so every placement takes 0 µs"
            )

    # ------------------------------------------------------------------ basic shape
    @property
    def n_ops(self) -> int:
        return int(self.cost.shape[0])

    @property
    def n_edges(self) -> int:
        return int(self.edges.shape[0])

    def __repr__(self) -> str:
        return f"Graph(n_ops={self.n_ops}, n_edges={self.n_edges})"

    # ------------------------------------------------------------------ adjacency (CSR)
    @functools.cached_property
    def _children_csr(self) -> tuple[np.ndarray, np.ndarray]:
        return _csr(self.edges[:, 0], self.edges[:, 1], self.n_ops)

    @functools.cached_property
    def _parents_csr(self) -> tuple[np.ndarray, np.ndarray]:
        return _csr(self.edges[:, 1], self.edges[:, 0], self.n_ops)

    def children(self, v: int) -> np.ndarray:
        """Consumers of op v, increasing index."""
        offsets, targets = self._children_csr
        return targets[offsets[v] : offsets[v + 1]]

    def parents(self, v: int) -> np.ndarray:
        """Producers of op v's inputs, increasing index."""
        offsets, targets = self._parents_csr
        return targets[offsets[v] : offsets[v + 1]]

    @property
    def out_degree(self) -> np.ndarray:  # [N] int64
        return np.diff(self._children_csr[0])

    @property
    def in_degree(self) -> np.ndarray:  # [N] int64
        return np.diff(self._parents_csr[0])

    @functools.cached_property
    def digest(self) -> str:
        """SHA-256 (hex) of the graph's content: costs, sizes, edges, names, op types and
        co-location, so that two graphs with one digest simulate and place alike."""
        h = hashlib.sha256()
        for arr in (self.cost, self.out_bytes, self.param_bytes, self.edges):
            h.update(np.ascontiguousarray(arr).tobytes())
        h.update("\0".join(self.names).encode())
        h.update("\0".join(self.op_types or ()).encode())
        if self.colocation is not None:
            h.update(self.colocation.tobytes())
        h.update(repr(self.costs_for).encode())
        if self.kernels is not None:
            h.update(self.kernels.tobytes())
        return h.hexdigest()

    @property
    def kernel_counts(self) -> np.ndarray:  # [N] int64
        """Kernels each op runs back to back: `kernels`, else 1 per op of nonzero cost."""
        if self.kernels is not None:
            return self.kernels
        return (self.cost > 0).astype(np.int64)

    # ------------------------------------------------------------------ co-location
    @functools.cached_property
    def colocation_classes(self) -> np.ndarray:
        """[N] int64 class of each op: ops sharing a `colocation` id >= 0 share one, every other
        op is its own; classes are numbered by their smallest op index."""
        if self.colocation is None:
            return np.arange(self.n_ops, dtype=np.int64)
        key = np.where(self.colocation >= 0, self.colocation, -1 - np.arange(self.n_ops))
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        rank = np.argsort(np.argsort(first))
        return rank[inverse.ravel()].astype(np.int64)

    def colocated(self, classes: Sequence[Sequence[str]]) -> Graph:
        """This graph with each list of op names added as a co-location class (a class that
        shares an op with another, or with one the graph has, joins it). ValueError names the
        class and the op when a name is not an op of the graph."""
        index = {name: v for v, name in enumerate(self.names)}
        groups = []
        for k, names in enumerate(classes):
            if isinstance(names, str):
                raise ValueError(f"co-location class {k} must be a list of op names, got {names!r}")
            missing = next((n for n in names if n not in index), None)
            if missing is not None:
                raise ValueError(
                    f"co-location class {k} names {missing!r}, which is not an op of the graph"
                )
            groups.append([index[n] for n in names])
        kept = self.colocation_classes
        members = np.split(np.argsort(kept, kind="stable"), np.cumsum(np.bincount(kept))[:-1])
        joined = joined_classes(self.n_ops, [*members, *groups])
        return dataclasses.replace(self, colocation=joined)

    # ------------------------------------------------------------------ order
    @functools.cached_property
    def topological_order(self) -> np.ndarray:
        """[N] int64: Kahn's algorithm, smallest ready index first (deterministic)."""
        import heapq

        indegree = self.in_degree.copy()
        heap = [int(v) for v in np.flatnonzero(indegree == 0)]
        heapq.heapify(heap)
        order: list[int] = []
        while heap:
            v = heapq.heappop(heap)
            order.append(v)
            for c in self.children(v):
                indegree[c] -= 1
                if indegree[c] == 0:
                    heapq.heappush(heap, int(c))
        if len(order) != self.n_ops:
            cycle = self._find_cycle(indegree > 0)
            shown = " -> ".join(self.names[v] for v in [*cycle, cycle[0]])
            raise ValueError(f"graph has a cycle: {shown}")
        return np.asarray(order, dtype=np.int64)

    def _find_cycle(self, remaining: np.ndarray) -> list[int]:
        """Ops left after Kahn's algorithm each have a remaining parent: walk parents until a
        repeat, then return the ops of that cycle in edge order."""
        v = int(np.flatnonzero(remaining)[0])
        seen: dict[int, int] = {}
        path: list[int] = []
        while v not in seen:
            seen[v] = len(path)
            path.append(v)
            v = next(int(u) for u in self.parents(v) if remaining[u])
        cycle = path[seen[v] :]
        return cycle[::-1]

    @functools.cached_property
    def depth(self) -> np.ndarray:
        """[N] int64: length of the longest path from a root to each op (roots have depth 0)."""
        depth = np.zeros(self.n_ops, dtype=np.int64)
        for v in self.topological_order:
            parents = self.parents(v)
            if parents.size:
                depth[v] = depth[parents].max() + 1
        return depth

    # ------------------------------------------------------------------ reachability (bit-packed)
    @functools.cached_property
    def descendants_packed(self) -> np.ndarray:
        """[N, ceil(N/8)] uint8: bit u of row v (NumPy `packbits` order) is set when u is
        reachable from v by a non-empty path."""
        return self._reach(self.topological_order[::-1], self.children)

    @functools.cached_property
    def ancestors_packed(self) -> np.ndarray:
        """[N, ceil(N/8)] uint8: bit u of row v is set when v is reachable from u."""
        return self._reach(self.topological_order, self.parents)

    def _reach(self, order: np.ndarray, neighbours) -> np.ndarray:
        n = self.n_ops
        reach = np.zeros((n, (n + 7) // 8), dtype=np.uint8)
        own_bit = np.zeros_like(reach)
        idx = np.arange(n)
        own_bit[idx, idx // 8] = np.uint8(1) << (7 - (idx % 8)).astype(np.uint8)
        for v in order:
            nbrs = neighbours(v)
            if nbrs.size:
                reach[v] = np.bitwise_or.reduce(reach[nbrs] | own_bit[nbrs], axis=0)
        return reach

    def descendants(self, v: int) -> np.ndarray:
        """Indices of all ops reachable from v (excluding v), increasing."""
        return np.flatnonzero(np.unpackbits(self.descendants_packed[v], count=self.n_ops))

    def ancestors(self, v: int) -> np.ndarray:
        """Indices of all ops from which v is reachable (excluding v), increasing."""
        return np.flatnonzero(np.unpackbits(self.ancestors_packed[v], count=self.n_ops))

    def is_ancestor(self, u: int, v: int) -> bool:
        """True when there is a non-empty path u -> ... -> v."""
        return bool(self.descendants_packed[u, v // 8] >> (7 - v % 8) & 1)

    def index(self, name: str) -> int:
        """Index of the op called `name`."""
        try:
            return self._name_index[name]
        except KeyError:
            raise ValueError(f"no op named {name!r} in this graph") from None

    @functools.cached_property
    def _name_index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}


# ---------------------------------------------------------------------- validation helpers
def joined_classes(n_ops: int, groups: Sequence[Sequence[int]]) -> np.ndarray | None:
    """[n_ops] int64 co-location id per op from groups of ops that must share a device, groups
    that share an op joined (union-find): ids number the classes of two or more ops by their
    smallest op, -1 for the rest; None when no class has two ops."""
    root = np.arange(n_ops)

    def find(v: int) -> int:
        while root[v] != v:
            root[v] = root[root[v]]
            v = int(root[v])
        return v

    for ops in groups:
        ops = [int(v) for v in ops]
        for v in ops[1:]:
            a, b = find(ops[0]), find(v)
            root[max(a, b)] = min(a, b)
    roots = np.array([find(v) for v in range(n_ops)])
    shared = np.bincount(roots, minlength=n_ops)[roots] > 1
    if not shared.any():
        return None
    ids = np.full(n_ops, -1, dtype=np.int64)
    ids[shared] = np.unique(roots[shared], return_inverse=True)[1].ravel()
    return ids


def _kernels(kernels: Sequence[int] | np.ndarray | None, cost: np.ndarray) -> np.ndarray | None:
    """Validated kernel counts: integers >= 0, nonzero exactly where the cost is; None when
    they are the default (1 per op of nonzero cost)."""
    if kernels is None:
        return None
    arr = np.asarray(kernels)
    n = cost.shape[0]
    if arr.shape != (n,) or not np.issubdtype(arr.dtype, np.integer) or np.any(arr < 0):
        raise ValueError(f"kernels must be {n} integers >= 0 (kernels per op)")
    big = np.flatnonzero(arr > MAX_KERNELS)
    if big.size:
        v = int(big[0])
        raise ValueError(f"op {v} runs {int(arr[v])} kernels, above {MAX_KERNELS:,} per op")
    wrong = np.flatnonzero((arr > 0) != (cost > 0))
    if wrong.size:
        v = int(wrong[0])
        raise ValueError(
            f"op {v} has cost {cost[v]} and {int(arr[v])} kernels; an op runs at least one "
            "kernel exactly when its cost is nonzero"
        )
    arr = arr.astype(np.int64)
    return None if np.array_equal(arr, (cost > 0).astype(np.int64)) else arr


def _costs_for(value) -> tuple[str, float] | None:
    if value is None:
        return None
    try:
        preset, speed = value
        speed = float(speed)
    except (TypeError, ValueError):
        raise ValueError(f"costs_for must be (preset name, speed), got {value!r}") from None
    if not isinstance(preset, str) or not (np.isfinite(speed) and speed > 0):
        raise ValueError(f"costs_for must be (preset name, speed > 0), got {value!r}")
    from placeto_jax.cluster import CUSTOM, PRESETS  # the names a graph's costs can be for

    if preset not in PRESETS and preset != CUSTOM and not preset.startswith(MEASURED):
        raise ValueError(
            f"costs_for names an unknown cluster preset {preset!r}; the presets are "
            f"{', '.join(PRESETS)} (or {CUSTOM!r}, a cluster of your own, or "
            f"'{MEASURED}BACKEND' for measured costs)"
        )
    return (preset, speed)


def _vector(field: str, values, n: int | None = None, *, limit: float) -> np.ndarray:
    """[N] float64 copy of `values`: ValueError for booleans, non-numbers, a wrong length,
    non-finite, negative or above `limit` entries (naming the op)."""
    raw = np.asarray(values) if not isinstance(values, np.ndarray) else values
    if raw.dtype == bool or (raw.dtype == object and any(isinstance(x, bool) for x in raw.flat)):
        raise ValueError(f"{field} must be numbers, got booleans")
    if raw.dtype.kind in "USO" and any(isinstance(x, str | bytes) for x in raw.flat):
        raise ValueError(f"{field} must be numbers, got text ({str(next(iter(raw.flat)))!r})")
    try:
        arr = np.array(values, dtype=np.float64)  # a copy: the graph owns its arrays
    except (TypeError, ValueError) as err:
        raise ValueError(f"{field} must be numbers: {err}") from None
    if arr.ndim != 1:
        raise ValueError(f"{field} must be one-dimensional, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{field} has {arr.shape[0]} entries, expected {n} (one per op)")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{field} is not finite at op {bad[0]} (value {arr[bad[0]]})")
    neg = np.flatnonzero(arr < 0)
    if neg.size:
        raise ValueError(f"{field} is negative at op {neg[0]} (value {arr[neg[0]]})")
    big = np.flatnonzero(arr > limit)
    if big.size:
        raise ValueError(f"{field} is above {limit:g} at op {big[0]} (value {arr[big[0]]:g})")
    arr.setflags(write=False)
    return arr


def _names(names, n: int) -> tuple[str, ...]:
    if names is None:
        return tuple(f"op{i}" for i in range(n))
    out = tuple(str(x) for x in names)
    if len(out) != n:
        raise ValueError(f"names has {len(out)} entries, expected {n} (one per op)")
    if len(set(out)) != n:
        seen: set[str] = set()
        dup = next(x for x in out if x in seen or seen.add(x))
        raise ValueError(f"op names must be unique; {dup!r} appears more than once")
    return out


def _edges(edges, n: int, names: tuple[str, ...] | None) -> np.ndarray:
    if edges is None or isinstance(edges, str | bytes) or not hasattr(edges, "__iter__"):
        raise ValueError(
            f"edges must be a list of (producer, consumer) pairs, got {type(edges).__name__}"
        )
    pairs = list(edges) if not isinstance(edges, np.ndarray) else edges
    if len(pairs) == 0:
        arr = np.zeros((0, 2), dtype=np.int64)
    else:
        arr = np.asarray(pairs, dtype=object)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise ValueError(f"edges must be (producer, consumer) pairs, got shape {arr.shape}")
        lookup = {name: i for i, name in enumerate(names)} if names is not None else {}
        arr = np.vectorize(lambda x: _op_ref(x, n, lookup), otypes=[np.int64])(arr)
    loops = np.flatnonzero(arr[:, 0] == arr[:, 1])
    if loops.size:
        v = int(arr[loops[0], 0])
        label = names[v] if names is not None else str(v)
        raise ValueError(f"edge ({label}, {label}) is a self-loop")
    arr = np.unique(arr, axis=0) if arr.size else arr
    arr.setflags(write=False)
    return arr


def _op_ref(x, n: int, lookup: dict[str, int]) -> int:
    if isinstance(x, str):
        if x not in lookup:
            raise ValueError(f"edge refers to unknown op {x!r}")
        return lookup[x]
    if not isinstance(x, (int, float, np.integer, np.floating)) or isinstance(x, (bool, np.bool_)):
        raise ValueError(f"edge endpoints must be op indices or names, got {x!r}")
    if not float(x).is_integer():
        raise ValueError(f"edge endpoints must be op indices or names, got {x!r}")
    i = int(x)
    if not 0 <= i < n:
        raise ValueError(f"edge refers to unknown op {i}; the graph has ops 0..{n - 1}")
    return i


def _csr(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((dst, src))
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.add.at(offsets, src + 1, 1)
    return np.cumsum(offsets), dst[order].astype(np.int64)
