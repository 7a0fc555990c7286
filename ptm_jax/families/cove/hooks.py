"""What the spine asks of the CoVe family besides its model and objective: gradient-norm groups and the head of
a params tree."""
from __future__ import annotations

from collections.abc import Sequence

TRUNK = "cove"


def layer_of(keys: Sequence[str]) -> str:
    """Parameter path -> gradient-norm group: 'encoder/lstm_<i>', 'decoder/<part>'."""
    keys = [str(k) for k in keys]
    for i, k in enumerate(keys):
        if k in ("encoder", "decoder") and i + 1 < len(keys):
            return f"{k}/{keys[i + 1]}"
    return "other"


def infer_head(params: dict) -> str:
    return "translation"
