"""ptm_jax.objectives."""
