"""ptm_jax.train."""
