"""ptm_jax.data.tasks."""
