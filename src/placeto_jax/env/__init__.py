"""The Placeto MDP: a bank of padded graphs (host) and pure reset/step functions (device)."""

from placeto_jax.env.bank import Bank, PlacementGraph, build_bank, choose_bucket, prepare
from placeto_jax.env.core import DeviceBank, EnvParams, EnvState, Observation, PlacetoEnv

__all__ = [
    "Bank",
    "DeviceBank",
    "EnvParams",
    "EnvState",
    "Observation",
    "PlacementGraph",
    "PlacetoEnv",
    "build_bank",
    "choose_bucket",
    "prepare",
]
