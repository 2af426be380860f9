"""Training Placeto: REINFORCE as pure JAX (`train`), the host loop, evaluation, checkpoints."""
