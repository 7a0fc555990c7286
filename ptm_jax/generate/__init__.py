"""Text generation: sampling filters (`ptm generate` is ``commands/generate.py``); the decode loop belongs to a
family with the 'generate' capability (``Inspection.generate``)."""
from ptm_jax.generate.sampling import filter_logits, sample, top_k_filter, top_p_filter

__all__ = ["filter_logits", "sample", "top_k_filter", "top_p_filter"]
