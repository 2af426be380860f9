"""The stages the place pipeline chains around a policy (`placeto_jax.pipeline`): where episodes
start (`starts`) and the search from a placement (`policy_search`: policy-guided search, random
proposals, the memory squeeze adapter). Unlike `placers`, these build on the agent (env, rl)."""
