"""ptm_jax.data.pretraining."""
