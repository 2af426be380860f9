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
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

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
