"""finetune.task -> builder for the tasks beyond sentence classification (span QA, tagging, choice).

Each builder takes (cfg, model_cfg, tokenizer) and returns (objective, description).
"""
from __future__ import annotations

from typing import Any, Callable

TASK_BUILDERS: dict[str, Callable[..., tuple[Any, str]]] = {}
