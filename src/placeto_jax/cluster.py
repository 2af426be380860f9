"""Device clusters: per-device speed, memory and outgoing bandwidth, plus the simulator's constants.

Units inside: bytes, microseconds, bytes per microsecond (1 GB/s = 1000 bytes/µs, GB = 1e9 bytes).

Presets (`Cluster.preset(name, n_devices)`; numbers and sources in docs/cluster-presets.md):
speeds are relative to one K80 GPU die (4.37 TFLOPS FP32), the hardware Placeto's op costs were
profiled on, and bandwidth is the per-device outgoing bus of the simulator.

    preset        speed  memory  bandwidth  delta1  delta2
    placeto-k80   1.0    12 GB   7.6 GB/s   5.7 µs  25 µs   (Placeto's simulator defaults)
    p100          2.13   16 GB   12 GB/s    5.0 µs  15 µs
    v100          3.2    16 GB   12 GB/s    4.0 µs  10 µs
    v100-nvlink   3.59   16 GB   150 GB/s   4.0 µs  10 µs
    a100          4.46   80 GB   300 GB/s   3.0 µs   8 µs
    h100          15.33  80 GB   450 GB/s   3.0 µs   8 µs

Your own devices: a cluster file (JSON; `read_cluster`, docs/cluster-presets.md), such as
`{"n_devices": 4, "speed": [1, 1, 3.2, 3.2], "memory_gb": 16}`, or `Cluster(...)` in Python.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np

from placeto_jax.files import atomic_write

GB = 1e9  # bytes
MAX_DEVICES = 1024  # the largest cluster a run may describe
GBPS = 1e3  # bytes per µs in one GB/s


CUSTOM = "custom"  # the name of a cluster that is no preset


@dataclasses.dataclass(frozen=True)
class Cluster:
    """D devices and the simulator's timing constants. Scalars broadcast to every device.

    `Cluster(n_devices=4)` is the `placeto-k80` preset; keyword arguments override it.
    """

    n_devices: int
    speed: tuple[float, ...] | float = 1.0  # [D] relative to speed 1.0 (op runs cost/speed µs)
    memory: tuple[float, ...] | float = 12 * GB  # [D] bytes
    bandwidth: tuple[float, ...] | float = 7.6 * GBPS  # [D] bytes/µs of the outgoing bus
    delta1: float = 5.7  # µs a device stays busy after an op of nonzero duration
    delta2: float = 25.0  # µs a bus stays busy after a transfer's data arrived
    broadcast: bool = True  # one transfer serves all remote consumers (Placeto's model)
    name: str = CUSTOM

    def __post_init__(self) -> None:
        if isinstance(self.n_devices, bool) or not isinstance(self.n_devices, (int, np.integer)):
            raise ValueError(f"n_devices must be an integer, got {self.n_devices!r}")
        if self.n_devices < 1:
            raise ValueError(f"n_devices must be at least 1, got {self.n_devices}")
        if self.n_devices > MAX_DEVICES:
            raise ValueError(
                f"n_devices must be at most {MAX_DEVICES} (the simulator's cost grows with D "
                f"squared), got {self.n_devices}"
            )
        object.__setattr__(self, "n_devices", int(self.n_devices))
        for field in ("speed", "memory", "bandwidth"):
            object.__setattr__(self, field, self._per_device(field, getattr(self, field)))
        for field in ("delta1", "delta2"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise ValueError(f"{field} must be a finite number >= 0 µs, got {value!r}")
            value = float(value)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{field} must be a finite number >= 0 µs, got {value}")
            object.__setattr__(self, field, value)
        object.__setattr__(self, "broadcast", bool(self.broadcast))

    def _per_device(self, field: str, value) -> tuple[float, ...]:
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{field} must be numbers, got {value!r}") from None
        if arr.ndim == 0:
            arr = np.full(self.n_devices, float(arr))
        if arr.shape != (self.n_devices,):
            raise ValueError(
                f"{field} needs one value or {self.n_devices} (one per device), got {arr.size}"
            )
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError(f"{field} must be finite and > 0 on every device, got {arr.tolist()}")
        return tuple(float(x) for x in arr)

    @classmethod
    def preset(cls, name: str, n_devices: int, **overrides) -> Cluster:
        """A named preset (see the module docstring) with optional keyword overrides."""
        if not isinstance(name, str) or name not in PRESETS:
            raise ValueError(f"unknown cluster preset {name!r}; choose one of {sorted(PRESETS)}")
        known = {f.name for f in dataclasses.fields(cls)} - {"n_devices", "name"}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(
                f"unknown Cluster field {unknown[0]!r}; the fields are {', '.join(sorted(known))}"
            )
        return cls(n_devices=n_devices, **{**PRESETS[name], "name": name, **overrides})

    @property
    def speed_array(self) -> np.ndarray:  # [D]
        return np.asarray(self.speed, dtype=np.float64)

    @property
    def memory_array(self) -> np.ndarray:  # [D] bytes
        return np.asarray(self.memory, dtype=np.float64)

    @property
    def bandwidth_array(self) -> np.ndarray:  # [D] bytes/µs
        return np.asarray(self.bandwidth, dtype=np.float64)

    def fastest_device(self) -> int:
        return int(np.argmax(self.speed_array))

    def preset_name(self) -> str:
        """The preset this cluster is exactly (its name), else `CUSTOM`."""
        if self.name in PRESETS and self == Cluster.preset(self.name, self.n_devices):
            return self.name
        return CUSTOM

    def document(self) -> dict:
        """The cluster as a cluster file's JSON object (`from_document` reads it back)."""
        doc: dict = {"name": self.name, "n_devices": self.n_devices}
        for key, (field, unit) in FILE_UNITS.items():
            value = getattr(self, field)
            doc[key] = [v / unit for v in value] if isinstance(value, tuple) else value / unit
        return {**doc, "broadcast": self.broadcast}

    @classmethod
    def from_document(cls, doc: object, source: str = "cluster") -> Cluster:
        """A cluster from a cluster file's JSON object: `n_devices`, and optionally `preset`
        (the values it starts from; default placeto-k80), `name`, `speed`, `memory_gb`,
        `bandwidth_gb_per_s` (each one number or one per device), `delta1_us`, `delta2_us`,
        `broadcast`. ValueError naming `source` and the key at fault."""
        if not isinstance(doc, dict):
            raise ValueError(f"{source}: a cluster is a JSON object, got {type(doc).__name__}")
        unknown = sorted(set(doc) - set(FILE_KEYS))
        if unknown:
            raise ValueError(
                f"{source}: unknown key {unknown[0]!r}; the keys are {', '.join(FILE_KEYS)}"
            )
        if "n_devices" not in doc:
            raise ValueError(f"{source}: n_devices is missing (the number of devices)")
        base = doc.get("preset", "placeto-k80")
        if not isinstance(base, str) or base not in PRESETS:
            raise ValueError(f"{source}: preset must be one of {', '.join(PRESETS)}, not {base!r}")
        name = doc.get("name", base if set(doc) <= {"n_devices", "preset"} else CUSTOM)
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{source}: name must be a non-empty string, not {name!r}")
        values = dict(PRESETS[base])
        for key, (field, unit) in FILE_UNITS.items():
            if key in doc:
                values[field] = _scaled(doc[key], unit)
        if "broadcast" in doc and not isinstance(doc["broadcast"], bool):
            raise ValueError(f"{source}: broadcast must be true or false, not {doc['broadcast']!r}")
        try:
            return cls(n_devices=doc["n_devices"], name=name,
                       broadcast=doc.get("broadcast", True), **values)  # fmt: skip
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None


K80_TFLOPS = 4.37
PRESETS: dict[str, dict] = {
    "placeto-k80": dict(speed=1.0, memory=12 * GB, bandwidth=7.6 * GBPS, delta1=5.7, delta2=25.0),
    "p100": dict(
        speed=round(9.3 / K80_TFLOPS, 2),
        memory=16 * GB,
        bandwidth=12 * GBPS,
        delta1=5.0,
        delta2=15.0,
    ),
    "v100": dict(
        speed=round(14.0 / K80_TFLOPS, 2),
        memory=16 * GB,
        bandwidth=12 * GBPS,
        delta1=4.0,
        delta2=10.0,
    ),
    "v100-nvlink": dict(
        speed=round(15.7 / K80_TFLOPS, 2),
        memory=16 * GB,
        bandwidth=150 * GBPS,
        delta1=4.0,
        delta2=10.0,
    ),
    "a100": dict(
        speed=round(19.5 / K80_TFLOPS, 2),
        memory=80 * GB,
        bandwidth=300 * GBPS,
        delta1=3.0,
        delta2=8.0,
    ),
    "h100": dict(
        speed=round(67.0 / K80_TFLOPS, 2),
        memory=80 * GB,
        bandwidth=450 * GBPS,
        delta1=3.0,
        delta2=8.0,
    ),
}


# key of a cluster file -> (the Cluster field it sets, that field's unit in the file's)
FILE_UNITS: dict[str, tuple[str, float]] = {
    "speed": ("speed", 1.0),
    "memory_gb": ("memory", GB),
    "bandwidth_gb_per_s": ("bandwidth", GBPS),
    "delta1_us": ("delta1", 1.0),
    "delta2_us": ("delta2", 1.0),
}
FILE_KEYS = ("name", "preset", "n_devices", *FILE_UNITS, "broadcast")


def _scaled(value: object, unit: float) -> object:
    """`value` (one number or a list) times `unit`; anything else as it is (Cluster says why)."""
    numbers = (int, float)
    if isinstance(value, numbers) and not isinstance(value, bool):
        return value * unit
    if isinstance(value, list) and all(
        isinstance(v, numbers) and not isinstance(v, bool) for v in value
    ):
        return [v * unit for v in value]
    return value


def read_cluster(path: str | os.PathLike) -> Cluster:
    """The cluster in a cluster file (`Cluster.from_document`); ValueError naming the file."""
    try:
        with open(path, encoding="utf-8") as file:
            doc = json.load(file)
    except FileNotFoundError:
        raise ValueError(f"cluster file {os.fspath(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"cluster file {os.fspath(path)!r} does not read: {err}") from None
    return Cluster.from_document(doc, f"cluster file {os.fspath(path)!r}")


def write_cluster(path: str | os.PathLike, cluster: Cluster) -> None:
    """Write `cluster` as a cluster file (atomically)."""
    with atomic_write(path) as file:
        file.write((json.dumps(cluster.document(), indent=2) + "\n").encode())


def is_cluster_file(spec: str) -> bool:
    """Whether `--cluster SPEC` names a file (a .json path) rather than a preset."""
    return spec.endswith(".json") or os.sep in spec


def resolve_cluster(spec: str, n_devices: int | None) -> Cluster:
    """`--cluster SPEC`: a preset on `n_devices` devices, or the cluster in file SPEC (whose
    device count `n_devices`, when given, must match); ValueError naming the problem."""
    if is_cluster_file(spec):
        cluster = read_cluster(spec)
        if n_devices is not None and n_devices != cluster.n_devices:
            raise ValueError(
                f"cluster file {spec!r} describes {cluster.n_devices} devices, not {n_devices}; "
                "leave out the device count or change the file"
            )
        return cluster
    if spec not in PRESETS:
        raise ValueError(
            f"unknown cluster {spec!r}: give a preset ({', '.join(PRESETS)}) or a cluster "
            "file (.json)"
        )
    if n_devices is None:
        raise ValueError(f"cluster preset {spec!r} needs a device count (--devices)")
    return Cluster.preset(spec, n_devices)
