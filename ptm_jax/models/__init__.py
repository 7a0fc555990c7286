"""ptm_jax.models."""
