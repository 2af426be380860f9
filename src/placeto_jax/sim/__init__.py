"""The placement simulator: JAX core on padded arrays, host wrapper, Python reference."""
