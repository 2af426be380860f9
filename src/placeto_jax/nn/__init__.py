"""Networks: Placeto's graph-embedding policy (Flax Linen, message passing through jraph)."""

from placeto_jax.nn.policy import PlacetoPolicy

__all__ = ["PlacetoPolicy"]
