"""`ptm attention | probe | context-neighbors | vector-map`: looking inside models. The lead registers
them in ``ptm_jax/cli.py`` with ``register(subparsers)``; each command lives in the module of its concept."""
from __future__ import annotations


def register(subparsers) -> None:
    from ptm_jax.evaluate import attention_maps, probing, word_maps

    attention_maps.register(subparsers)
    probing.register(subparsers)
    word_maps.register(subparsers)
