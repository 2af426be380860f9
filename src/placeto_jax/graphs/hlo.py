"""The program XLA runs: the optimized HLO of a jitted function as placement ops (host-side).

`compiled_ops(fn, example_args, spec)` compiles `fn` for the current backend (nothing is run) and
reads the entry computation of the optimized module, after fusion and scheduling:
- **Ops** are its kernels: every fusion, custom call, copy, dot or convolution left unfused,
  collective, sort, `while`, `conditional` and other instruction that does work. Plumbing is not
  an op: `parameter`, `constant`, `tuple`, `get-tuple-element`, `bitcast`, `opt-barrier`,
  `after-all` and the `-done` half of an asynchronous pair pass their operands' dependencies on.
- **Names** are the name stack XLA keeps in each instruction's metadata (`op_name`: Flax module
  paths, `jax.named_scope`s, AD as `jvp(...)`/`transpose(...)`), without the outer
  `jit(<function>)`, so a fusion is named after the primitive it was rooted at
  (`jvp(MLP)/fc1/dot_general`); the instruction's own name where there is no metadata.
  Its op type is the last part of that name (the primitive), else the HLO opcode.
- **Costs** are the roofline of the kernel's FLOPs and bytes, without a launch term: the
  per-kernel overhead is the cluster's `delta1`, charged by the simulator after every op.
  FLOPs are summed over a fusion's fused computation (`dot`: 2 x output elements x contracted
  size; `convolution`: 2 x output elements x kernel elements per output feature; elementwise: 1
  per output element, transcendental `TRANSCENDENTAL_FLOPS`; `reduce`: 1 per input element;
  windowed: window size x output elements; `sort`: n x ceil(log2 d)); bytes are the kernel's
  operands plus its outputs, which is what a fused kernel moves to and from memory. A `while`
  costs its body and condition times the trip count XLA knows (`known_trip_count`, else 1), a
  `conditional` its most expensive branch, each plus the launches of their inner kernels.
- **Outputs** sizes come from HLO shapes. An output buffer that XLA aliases to a donated input
  (`input_output_alias`) and that no op reads is the input's buffer written in place: it is not
  counted again (the input's bytes are already the holder's `param_bytes`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax

from placeto_jax.graphs.costs import TRANSCENDENTAL_FLOPS, DeviceSpec, kernel_us, word_set

PLUMBING = word_set(
    """parameter constant tuple get-tuple-element bitcast opt-barrier after-all partition-id
    replica-id add-dependency"""
)
ELEMENTWISE = word_set(
    """add subtract multiply divide maximum minimum negate abs sign floor ceil round-nearest-afz
    round-nearest-even compare select clamp and or not xor shift-left shift-right-logical
    shift-right-arithmetic remainder popcnt count-leading-zeros is-finite real imag complex
    reduce-precision stochastic-convert"""
)
TRANSCENDENTAL = word_set(
    """exponential exponential-minus-one log log-plus-one logistic tanh sine cosine tan atan2
    sqrt rsqrt cbrt power erf"""
)
WINDOWED = word_set("reduce-window select-and-scatter")
CALLERS = {"fusion": "calls", "call": "to_apply", "async-start": "calls"}

DTYPE_BYTES = {
    "pred": 1, "s2": 0.25, "u2": 0.25, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2,
    "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
    "c128": 16, "token": 0,
}  # fmt: skip
_ARRAY = re.compile(r"\b([a-z]+[0-9]*(?:e[0-9]m[0-9][a-z0-9]*)?)\[([0-9,]*)\]")
_HEAD = re.compile(r"^\s*(ROOT\s+)?%([^\s=]+)\s*=\s*")
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%(\S+)\s.*\{\s*$")
_ALIAS = re.compile(r"\{([0-9,\s]*)\}:\s*\((\d+),")


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One HLO instruction, as printed."""

    name: str
    shape: str  # HLO shape text: "f32[32,64]{1,0}", a tuple "(f32[2]{0}, s32[])"
    opcode: str
    arguments: str  # the text between the opcode's parentheses
    attributes: str  # everything after the argument list

    @property
    def operands(self) -> tuple[str, ...]:
        """Names of the instructions it reads."""
        return tuple(re.findall(r"%([^\s,()]+)", self.arguments))

    @property
    def is_op(self) -> bool:
        """Whether it does work (is not plumbing; see the module docstring)."""
        return self.opcode not in PLUMBING and not self.opcode.endswith("-done")


@dataclasses.dataclass(frozen=True)
class Module:
    """The computations of an HLO module by name, its entry, and its donated outputs."""

    name: str  # the module's name (`jit_<function>`), as profiles report it
    computations: dict[str, tuple[Instruction, ...]]
    entry: str
    root: dict[str, str]  # computation -> its ROOT instruction's name
    aliases: dict[int, int]  # top-level output position -> the parameter whose buffer it reuses


@dataclasses.dataclass(frozen=True)
class HloOps:
    """The ops a trace found, in a topological order: the kernels of a module's entry
    computation (schedule order), or a jaxpr's equations (`graphs.trace`)."""

    cost: list[float]  # [N] µs on the pricing device (or measured)
    out_bytes: list[float]  # [N] bytes
    names: list[str]  # [N] base names (not yet unique)
    op_types: list[str]  # [N]
    edges: list[tuple[int, int]]  # [E] (producer, consumer)
    param_users: dict[int, set[int]]  # parameter number -> ops reading it
    outputs: list[frozenset[int]]  # [flat outputs] ops each output depends on


def compile_program(
    fn: Callable, example_args: Sequence[Any], donate_argnums: Sequence[int]
) -> tuple[Any, str, Any]:
    """`jax.jit(fn)` compiled for `example_args` on the current backend (every argument kept, so
    parameter i is flat input leaf i), its optimized HLO text, and the tree of output shapes."""
    jitted = jax.jit(fn, keep_unused=True, donate_argnums=tuple(donate_argnums))
    lowered = jitted.lower(*example_args)
    compiled = lowered.compile()
    return compiled, compiled.as_text(), lowered.out_info


def parse_module(text: str) -> Module:
    """Computations, entry and aliased outputs of an HLO module's text."""
    computations: dict[str, list[Instruction]] = {}
    roots: dict[str, str] = {}
    entry, current = "", None
    for line in text.splitlines():
        if current is None:
            found = _COMPUTATION.match(line)
            if found and not line.startswith("HloModule"):
                current = found.group(2)
                computations[current] = []
                entry = current if found.group(1) else entry
            continue
        if line.strip() == "}":
            current = None
            continue
        head = _HEAD.match(line)
        if head:
            computations[current].append(_instruction(head.group(2), line[head.end() :]))
            if head.group(1):
                roots[current] = head.group(2)
    if not entry:
        raise ValueError("the HLO text has no ENTRY computation")
    header = text.splitlines()[0] if text else ""
    named = re.match(r"HloModule\s+([^\s,]+)", header)
    frozen = {k: tuple(v) for k, v in computations.items()}
    return Module(named.group(1) if named else "", frozen, entry, roots, _aliased_outputs(header))


def _aliased_outputs(header: str) -> dict[int, int]:
    """Top-level output position -> parameter number, from the header's `input_output_alias`."""
    start = header.find("input_output_alias={")
    if start < 0:
        return {}
    body = header[start : _closing(header, header.index("{", start)) + 1]
    return {int(index.split(",")[0] or 0): int(param) for index, param in _ALIAS.findall(body)}


def _closing(text: str, start: int) -> int:
    """Index of the bracket closing the one at `start` (quoted text skipped)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack, quoted = [], False
    for i in range(start, len(text)):
        ch = text[i]
        if ch == '"' and text[i - 1] != "\\":
            quoted = not quoted
        elif quoted:
            continue
        elif ch in pairs:
            stack.append(pairs[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                return i
    raise ValueError(f"unbalanced HLO text: {text[start : start + 60]!r}")


def _instruction(name: str, rest: str) -> Instruction:
    """Parse `SHAPE opcode(arguments), attributes` after `%name = `."""
    end = _closing(rest, 0) + 1 if rest.startswith("(") else rest.index(" ")
    shape, rest = rest[:end], rest[end:].lstrip()
    open_at = rest.index("(")
    close_at = _closing(rest, open_at)
    return Instruction(
        name, shape, rest[:open_at], rest[open_at + 1 : close_at], rest[close_at + 1 :]
    )


def _arrays(shape: str) -> list[tuple[str, int]]:
    """(element type, element count) of every array in a shape."""
    return [
        (dtype, math.prod(int(d) for d in dims.split(",") if d))
        for dtype, dims in _ARRAY.findall(shape)
    ]


def element_bytes(dtype: str) -> float:
    """Bytes of one element of an HLO element type."""
    if dtype in DTYPE_BYTES:
        return DTYPE_BYTES[dtype]
    for prefix, size in (("f8", 1.0), ("f6", 0.75), ("f4", 0.5)):
        if dtype.startswith(prefix):
            return size
    raise ValueError(f"unknown HLO element type {dtype!r}")


def shape_bytes(shape: str) -> float:
    """Bytes of an HLO shape (a tuple's elements summed)."""
    return sum(element_bytes(dtype) * count for dtype, count in _arrays(shape))


def elements(shape: str) -> int:
    """Elements of an HLO shape (a tuple's elements summed)."""
    return sum(count for _, count in _arrays(shape))


def dims_of(shape: str) -> list[int]:
    """Dimensions of an array shape."""
    found = _ARRAY.search(shape)
    return [int(d) for d in found.group(2).split(",") if d] if found else []


def _attribute(attributes: str, key: str) -> str:
    """The value text of `key=` in an attribute list (a braced value whole), "" if absent."""
    found = re.search(rf"(?:^|[\s,]){re.escape(key)}=", attributes)
    if not found:
        return ""
    start = found.end()
    if attributes[start] in "{(":
        return attributes[start : _closing(attributes, start) + 1]
    return re.match(r"[^,\s]*", attributes[start:]).group(0)


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", text)]


def _called(attributes: str, key: str) -> list[str]:
    """Names of the computations an attribute names (`calls=%f`, `branch_computations={%a, %b}`)."""
    return re.findall(r"%([^\s,{}]+)", _attribute(attributes, key))


class _Costing:
    """FLOPs and µs of the instructions of one module."""

    def __init__(
        self, module: Module, spec: DeviceSpec, transcendental: float = TRANSCENDENTAL_FLOPS
    ) -> None:
        self.module, self.spec, self.transcendental = module, spec, transcendental
        self.shapes = {
            (comp, ins.name): ins.shape
            for comp, body in module.computations.items()
            for ins in body
        }

    def shape(self, computation: str, operand: str) -> str:
        return self.shapes[(computation, operand)]

    def flop_parts(self, computation: str, ins: Instruction) -> tuple[float, float, float]:
        """(all, dense convolution, grouped convolution) FLOPs of one instruction, a fusion's
        summed over its fused computation."""
        if ins.opcode in CALLERS and _called(ins.attributes, CALLERS[ins.opcode]):
            (called, *_) = _called(ins.attributes, CALLERS[ins.opcode])
            parts = [self.flop_parts(called, inner) for inner in self.module.computations[called]]
            return tuple(sum(p[k] for p in parts) for k in range(3))
        n = self._own_flops(computation, ins)
        if ins.opcode != "convolution":
            return n, 0.0, 0.0
        groups = _ints(_attribute(ins.attributes, "feature_group_count"))
        batch_groups = _ints(_attribute(ins.attributes, "batch_group_count"))
        grouped = (groups and groups[0] > 1) or (batch_groups and batch_groups[0] > 1)
        return (n, 0.0, n) if grouped else (n, n, 0.0)

    def flops(self, computation: str, ins: Instruction) -> float:
        """FLOPs of one instruction, a fusion's summed over its fused computation."""
        return self.flop_parts(computation, ins)[0]

    def _own_flops(self, computation: str, ins: Instruction) -> float:
        """FLOPs of one instruction that calls no computation."""
        op, out = ins.opcode, elements(ins.shape)
        if op == "dot":
            lhs = dims_of(self.shape(computation, ins.operands[0]))
            contracted = _ints(_attribute(ins.attributes, "lhs_contracting_dims"))
            return 2.0 * out * math.prod(lhs[d] for d in contracted)
        if op == "convolution":
            rhs = dims_of(self.shape(computation, ins.operands[1]))
            labels = _attribute(ins.attributes, "dim_labels").split("_")
            kernel = labels[1].split("->")[0] if len(labels) > 1 else ""
            features = rhs[kernel.index("o")] if "o" in kernel else 1
            return 2.0 * out * math.prod(rhs) / max(features, 1)
        if op in TRANSCENDENTAL:
            return self.transcendental * out
        if op in ELEMENTWISE:
            return float(out)
        if op == "reduce":
            inputs = ins.operands[: len(ins.operands) // 2]
            return float(sum(elements(self.shape(computation, o)) for o in inputs))
        if op in WINDOWED:
            size = re.search(r"size=([0-9x]+)", _attribute(ins.attributes, "window"))
            window = math.prod(int(s) for s in size.group(1).split("x")) if size else 1
            return float(out * window)
        if op == "sort":
            dims = dims_of(self.shape(computation, ins.operands[0]))
            axis = _ints(_attribute(ins.attributes, "dimensions"))
            length = dims[axis[0]] if axis and dims else 1
            return float(math.prod(dims) * math.ceil(math.log2(max(length, 1))))
        return 0.0

    def bytes_moved(self, computation: str, ins: Instruction) -> float:
        """The instruction's operand bytes plus its output bytes."""
        reads = sum(shape_bytes(self.shape(computation, o)) for o in ins.operands)
        return reads + shape_bytes(ins.shape)

    def op_us(self, computation: str, ins: Instruction) -> float:
        """µs of one op (loops and branches with their inner kernels' launches)."""
        if ins.opcode == "while":
            trips = re.search(r'"known_trip_count":\{"n":"?(\d+)', ins.attributes)
            bodies = _control_bodies(ins)  # body and condition
            return (int(trips.group(1)) if trips else 1) * sum(self.body_us(b) for b in bodies)
        if ins.opcode == "conditional":
            return max(self.body_us(b) for b in _control_bodies(ins))  # the branches
        flops, dense, grouped = self.flop_parts(computation, ins)
        return kernel_us(flops, self.bytes_moved(computation, ins), self.spec, dense, grouped)

    def body_us(self, computation: str) -> float:
        """µs of a loop body or branch: its kernels, each with the device's launch time."""
        body = self.module.computations[computation]
        return sum(self.op_us(computation, i) + self.spec.launch_us for i in body if i.is_op)


def entry_totals(module: Module, transcendental: float) -> tuple[float, float]:
    """(FLOPs, bytes) summed over the entry computation's ops, a transcendental element
    counting `transcendental` FLOPs (XLA's cost analysis counts them apart: 0)."""
    costing = _Costing(
        module, DeviceSpec(peak_flops=1.0, bandwidth=1.0, launch_us=0.0), transcendental
    )
    body = [i for i in module.computations[module.entry] if i.is_op]
    flops = sum(costing.flops(module.entry, i) for i in body)
    return flops, sum(costing.bytes_moved(module.entry, i) for i in body)


def module_ops(module: Module, spec: DeviceSpec) -> HloOps:
    """The ops, edges, parameter readers and output dependencies of the entry computation."""
    costing = _Costing(module, spec)
    entry, root = module.entry, module.root[module.entry]
    nodes: dict[str, frozenset[int]] = {}  # instruction -> ops its value depends on
    params: dict[str, frozenset[int]] = {}  # instruction -> parameters its value is (plumbing)
    ops = HloOps([], [], [], [], [], {}, [])
    read: set[int] = set()  # ops that another op reads
    inputs: dict[str, str] = {}  # parameter instruction -> the function input it is
    for ins in module.computations[entry]:
        if ins.opcode == "parameter":
            nodes[ins.name], params[ins.name] = frozenset(), frozenset(_ints(ins.arguments))
            inputs[ins.name] = "/".join(_metadata_name(ins)) or ins.name
            continue
        depends = frozenset().union(*(nodes[o] for o in ins.operands))
        reads = frozenset().union(*(params[o] for o in ins.operands))
        if not ins.is_op:
            nodes[ins.name], params[ins.name] = depends, reads
            continue
        v = len(ops.cost)
        name, op_type = _name(ins, inputs)
        ops.cost.append(costing.op_us(entry, ins))
        ops.out_bytes.append(shape_bytes(ins.shape))
        ops.names.append(name)
        ops.op_types.append(op_type)
        ops.edges.extend((u, v) for u in sorted(depends))
        read.update(depends)
        for p in reads:
            ops.param_users.setdefault(p, set()).add(v)
        nodes[ins.name], params[ins.name] = frozenset({v}), frozenset()
    root_ins = next(i for i in module.computations[entry] if i.name == root)
    flat = root_ins.operands if root_ins.opcode == "tuple" else (root,)
    ops.outputs.extend(nodes[o] for o in flat)
    shapes = {ins.name: ins.shape for ins in module.computations[entry]}
    for position in sorted(module.aliases):  # written in place into a donated input
        if position < len(flat) and len(ops.outputs[position]) == 1:
            (v,) = ops.outputs[position]
            if v not in read:
                ops.out_bytes[v] = max(0.0, ops.out_bytes[v] - shape_bytes(shapes[flat[position]]))
    return ops


def _control_bodies(ins: Instruction) -> list[str]:
    """The computations a `while` (body, condition) or `conditional` (branches) runs."""
    keys = ("body", "condition", "branch_computations", "true_computation", "false_computation")
    return [c for key in keys for c in _called(ins.attributes, key)]


def nested_kernels(module: Module, ins: Instruction) -> frozenset[str]:
    """The kernels a `while`, `conditional` or `call` runs inside it (its bodies, conditions and
    branches, recursively; not a fusion's fused instructions, which are one kernel)."""
    called = _control_bodies(ins)
    if ins.opcode == "call":
        called += _called(ins.attributes, "to_apply")
    found: set[str] = set()
    for computation in called:
        for inner in module.computations[computation]:
            if inner.is_op:
                found.add(inner.name)
                found |= nested_kernels(module, inner)
    return frozenset(found)


def _metadata_name(ins: Instruction) -> list[str]:
    """The parts of the metadata's `op_name`, without an outer `jit(<function>)`."""
    found = re.search(r'op_name="((?:[^"\\]|\\.)*)"', ins.attributes)
    text = re.sub(r"\\(.)", r"\1", found.group(1)) if found else ""
    parts = [p for p in text.split("/") if p]
    return parts[1:] if parts and parts[0].startswith("jit(") else parts


def _name(ins: Instruction, inputs: dict[str, str]) -> tuple[str, str]:
    """Base name and op type (see the module docstring); an op without metadata that reads a
    function input is named after it: `copy(params['fc1']['kernel'])`."""
    parts = _metadata_name(ins)
    if parts:
        return "/".join(parts), parts[-1]
    read = [inputs[o] for o in ins.operands if o in inputs]
    return (f"{ins.opcode}({read[0]})" if read else ins.name), ins.opcode
