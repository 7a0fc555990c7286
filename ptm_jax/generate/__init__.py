"""Text generation: sampling filters and the `ptm generate` command; the decode loop belongs to a family with
the 'generate' capability (``Inspection.generate``)."""
from ptm_jax.generate.sampling import filter_logits, sample, top_k_filter, top_p_filter

__all__ = ["filter_logits", "sample", "top_k_filter", "top_p_filter"]
