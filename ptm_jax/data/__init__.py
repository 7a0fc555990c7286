"""ptm_jax.data."""
