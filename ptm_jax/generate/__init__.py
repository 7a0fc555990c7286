"""Text generation with GPT models: sampling filters, a KV-cached decode loop and the `ptm generate` command."""
from ptm_jax.generate.decode import generate
from ptm_jax.generate.sampling import filter_logits, sample, top_k_filter, top_p_filter

__all__ = ["generate", "filter_logits", "sample", "top_k_filter", "top_p_filter"]
