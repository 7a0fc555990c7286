"""Weights in and out of ptm_jax: the params directory every later stage loads (``params``), Hugging Face
BERT import/export (``hf_bert``) and the ``ptm import-hf | export | embed | predict`` handlers (``commands``)."""
