"""The paper's experiments and hyperparameter sweeps, one command each (`placeto-jax reproduce`,
`placeto-jax sweep`); every output goes under `results/<experiment>/` (see `output.Recorder`)."""
