"""ptm_jax.evaluate."""
