"""ptm_jax: pretraining and finetuning the classic pretrained-language-model family in JAX/Flax."""
__version__ = "0.1.0"
