"""ptm_jax.parallel."""
