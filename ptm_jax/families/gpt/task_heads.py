"""GPT finetuning head (Radford et al. 2018 Sec. 3.2, Figure 1 right).

Params ``{'gpt': trunk, 'classifier': linear}``: the trunk is the pretrained ``GPTModel`` and the LM logits
of the auxiliary objective reuse its tied token embedding. Inputs hold V views per example (V = 2 for the
similarity transform, else 1); the hidden states at each view's extract token are summed, passed through
dropout and the linear classifier.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from ptm_jax.families.gpt.config import GptConfig
from ptm_jax.families.gpt.model import GPTModel
from ptm_jax.models.dropout import Dropout
from ptm_jax.models.layers import Dense, dtype_of


def _extract_states(trunk: GPTModel, input_ids, segment_ids, position_ids, extract_index, deterministic: bool):
    """Runs the trunk on every view: (states at the extract tokens [B, V, H], LM logits [B, V, L, vocab])."""
    b, v, length = input_ids.shape
    flat = lambda x: x.reshape(b * v, length)  # noqa: E731
    hidden = trunk(flat(input_ids), flat(segment_ids), flat(position_ids), deterministic=deterministic)
    hidden = hidden.reshape(b, v, length, -1)
    final = jnp.take_along_axis(hidden, extract_index[:, :, None, None].astype(jnp.int32), axis=2)[:, :, 0]
    table = trunk.embedding_table().astype(hidden.dtype)
    return final, jnp.einsum("bvlh,nh->bvln", hidden, table).astype(jnp.float32)


class GPTForSequenceClassification(nn.Module):
    cfg: GptConfig
    num_labels: int
    dropout: float = 0.1

    @nn.compact
    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array, position_ids: jax.Array,
                 extract_index: jax.Array, *, deterministic: bool = True) -> tuple[jax.Array, jax.Array]:
        """input/segment/position ids [B, V, L], extract_index [B, V] -> (class logits [B, C] float32,
        LM logits [B, V, L, vocab] float32)."""
        final, lm_logits = _extract_states(GPTModel(self.cfg, name="gpt"), input_ids, segment_ids, position_ids,
                                           extract_index, deterministic)
        pooled = jnp.sum(final, axis=1)  # similarity: both orders summed; otherwise the single view
        pooled = Dropout(self.dropout)(pooled, deterministic=deterministic)
        logits = Dense(self.num_labels, ("embed", "classes"), self.cfg.initializer_range,
                       dtype=dtype_of(self.cfg.dtype), name="classifier")(pooled)
        return logits.astype(jnp.float32), lm_logits


class GPTForMultipleChoice(nn.Module):
    """One view per option (``[s] context $ option [e]``); a linear score of each [e] state; the caller
    takes the softmax over the options (Radford et al. 2018 Sec. 3.3, multiple choice)."""

    cfg: GptConfig
    dropout: float = 0.1

    @nn.compact
    def __call__(self, input_ids: jax.Array, segment_ids: jax.Array, position_ids: jax.Array,
                 extract_index: jax.Array, *, deterministic: bool = True) -> tuple[jax.Array, jax.Array]:
        """[B, C, L] inputs, extract_index [B, C] -> (option scores [B, C], LM logits [B, C, L, vocab])."""
        final, lm_logits = _extract_states(GPTModel(self.cfg, name="gpt"), input_ids, segment_ids, position_ids,
                                           extract_index, deterministic)
        final = Dropout(self.dropout)(final, deterministic=deterministic)
        scores = Dense(1, ("embed", "classes"), self.cfg.initializer_range, dtype=dtype_of(self.cfg.dtype),
                       name="classifier")(final)[..., 0]
        return scores.astype(jnp.float32), lm_logits
