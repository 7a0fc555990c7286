"""ptm GPT checkpoints in EleutherAI's lm-evaluation-harness (``lm_eval`` 0.4; Gao et al. 2021, "A framework for
few-shot language model evaluation"): the model class :class:`PtmLM`, registered with the harness as ``"ptm"``,
and :func:`run_tasks`, what ``ptm lm-eval`` calls (``commands/lm_eval.py``).

The harness turns every task into three kinds of request and this class answers them the way its own
Hugging Face class (``lm_eval/models/huggingface.py``, ``HFLM``) does for a GPT-2, so that a model and its
``ptm export`` give the same scores:

* ``loglikelihood(context, continuation)``: the harness's ``TemplateLM`` splits the pair into tokens (trailing
  spaces of the context move to the continuation; an empty context becomes the end-of-text token); the input is
  the last ``max_length + 1`` tokens minus the final one, and the answer is the summed log-probability of the
  continuation tokens and whether each was the argmax.
* ``loglikelihood_rolling(text)``: the text in disjoint windows of the context (``lm_eval.utils``'
  ``get_rolling_token_windows``, end-of-text first), each scored as above and summed (word/byte perplexity).
* ``generate_until(context, gen_kwargs)``: the KV-cached decode loop of ``families/gpt/decode.py`` (greedy unless
  ``do_sample``), the context left-truncated to ``max_length - max_gen_toks``, the text cut at the first stop
  string (``until`` plus the end-of-text token's text).

Batches have a fixed number of rows and a width rounded up to a power of two (at least 16), so the scorer and the
prefill compile once per width, not once per request. ``lm_eval`` is an optional dependency: it is imported as
installed, else from ``PTM_LM_EVAL_DIR`` or ``<venv>/lm_eval`` (where the README's test command puts it with
``pip install --target``), appended to ``sys.path`` so the environment's own packages win.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from ptm_jax.errors import ConfigError

INSTALL = "pip install --no-deps --target .venv/lm_eval -r requirements/lm_eval.lock"
END_OF_TEXT = "<|endoftext|>"


def _locate_lm_eval() -> None:
    """Makes ``lm_eval`` importable or raises a ConfigError that says how to install it."""
    if importlib.util.find_spec("lm_eval") is not None:
        return
    folder = Path(os.environ.get("PTM_LM_EVAL_DIR") or Path(sys.prefix) / "lm_eval")
    if (folder / "lm_eval").is_dir():
        sys.path.append(str(folder))
        importlib.invalidate_caches()
        return
    raise ConfigError(f"lm_eval (EleutherAI's lm-evaluation-harness) is not installed and {folder} holds none: "
                      f"`{INSTALL}`, or set PTM_LM_EVAL_DIR to a folder that holds it")


_locate_lm_eval()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from lm_eval import utils as lm_utils  # noqa: E402
from lm_eval.api.model import TemplateLM  # noqa: E402
from lm_eval.api.registry import register_model  # noqa: E402
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text  # noqa

MIN_WIDTH = 16


def bucket(n: int, cap: int) -> int:
    """The padded width of a batch whose longest row has n tokens: the next power of two >= max(n, 16), at most
    ``cap``."""
    w = MIN_WIDTH
    while w < n:
        w *= 2
    return min(w, cap)


_SCORERS: dict[str, Any] = {}


def scorer(cfg: Any):
    """``score(params, ids [B, W], targets [B, W]) -> (log-probability of each target, whether it is the argmax)``,
    jitted, one per model config (memoised: a second model of the same shape reuses the compiled widths)."""
    from ptm_jax.config_loading import to_dict
    from ptm_jax.objectives.task_data import task_head

    key = json.dumps(to_dict(cfg), sort_keys=True)
    if key not in _SCORERS:
        model = task_head(cfg, "causal_lm")(cfg)

        @jax.jit
        def score(p, ids, targets):
            logits, _ = model.apply({"params": p}, ids, None, None, deterministic=True)
            logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
            picked = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
            return picked, jnp.argmax(logp, axis=-1) == targets

        _SCORERS[key] = score
    return _SCORERS[key]


@register_model("ptm")
class PtmLM(TemplateLM):
    """A ptm GPT (params directory, run directory or Hugging Face folder, read by ``export.params.load_params``)
    answering the harness's requests. ``pretrained``: the model path (``--model_args pretrained=PATH``);
    ``batch_size``: rows per compiled batch; ``max_length``: the context (default the model's
    ``max_position_embeddings``); ``max_gen_toks``: the default number of generated tokens (256, the harness's);
    ``seed``: of the sampling draws when a task asks for ``do_sample``."""

    def __init__(self, pretrained: str, batch_size: int | str = 8, max_length: int | None = None,
                 max_gen_toks: int = 256, seed: int = 0, **_: Any) -> None:
        super().__init__()
        from ptm_jax import fs
        from ptm_jax.export.params import load_params, load_tokenizer
        from ptm_jax.families import registry

        if not fs.exists(pretrained):
            raise ConfigError(f"{pretrained}: model not found; pass a GPT params directory, run directory or Hugging "
                              "Face folder (pretrained=PATH)")
        params, cfg, info, tok_dir = load_params(pretrained)
        fam = registry.get(cfg.family)
        if fam.inspection.generate is None or fam.layout.trunk not in params:
            able = sorted(n for n, f in registry.families().items() if f.inspection.generate is not None)
            raise ConfigError(f"{pretrained}: is a {cfg.family!r} model; the lm_eval 'ptm' model class needs a causal "
                              f"LM of a family that generates ({', '.join(able)})")
        self.params = params["params"] if set(params) == {"params"} else params
        self.cfg = cfg
        self.tokenizer = load_tokenizer(info, tok_dir)
        eos = info.get("eos_token_id")
        if not isinstance(eos, int) or eos < 0:
            eos = getattr(self.tokenizer, "eos_id", None)
        if not isinstance(eos, int) or not 0 <= eos < cfg.vocab_size:
            raise ConfigError(f"{pretrained}: the model has no end-of-text token id (eos_token_id in ptm.json, or "
                              f"{END_OF_TEXT} in its tokenizer); the harness needs one as the empty context")
        self._eot = eos
        self._max_length = int(max_length or cfg.max_position_embeddings)
        if self._max_length > cfg.max_position_embeddings:
            raise ConfigError(f"max_length={self._max_length} exceeds the model's context "
                              f"(max_position_embeddings={cfg.max_position_embeddings})")
        self.batch_size = 8 if str(batch_size).startswith("auto") else int(batch_size)
        if self.batch_size < 1:
            raise ConfigError(f"batch_size={batch_size} must be >= 1")
        self.max_gen_toks = int(max_gen_toks)
        self.seed = int(seed)
        self._score = scorer(cfg)

    # -- the harness's view of the model -------------------------------------------------------------------------
    @property
    def eot_token_id(self) -> int:
        return self._eot

    @property
    def max_length(self) -> int:
        return self._max_length

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        return list(self.tokenizer.encode(string))

    def tok_decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode([t for t in tokens if t != self._eot])

    # -- scoring -------------------------------------------------------------------------------------------------
    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        """(summed log-probability of the continuation, whether every continuation token was the argmax) of each
        ``(key, context_ids, continuation_ids)``, in the order given; rows sorted longest first, so a batch's
        width fits its rows."""
        rows = []
        for i, (_, context, continuation) in enumerate(requests):
            if not continuation:
                raise ConfigError(f"request {i}: the continuation encodes to no tokens")
            whole = (list(context) + list(continuation))[-(self._max_length + 1):]
            rows.append((whole[:-1], whole[1:], len(continuation)))
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
        out: list[tuple[float, bool]] = [(0.0, False)] * len(rows)
        b = self.batch_size
        for start in range(0, len(order), b):
            chunk = order[start:start + b]
            width = bucket(len(rows[chunk[0]][0]), self._max_length)
            ids = np.zeros((b, width), np.int32)
            targets = np.zeros((b, width), np.int32)
            for r, i in enumerate(chunk):
                inp, tgt, _ = rows[i]
                ids[r, :len(inp)], targets[r, :len(tgt)] = inp, tgt
            logp, top = jax.device_get(self._score(self.params, ids, targets))
            for r, i in enumerate(chunk):
                n, k = len(rows[i][0]), rows[i][2]
                out[i] = (float(logp[r, n - k:n].sum(dtype=np.float64)), bool(top[r, n - k:n].all()))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        windows, owner = [], []
        for i, (text,) in enumerate(req.args for req in requests):
            for window in map(lm_utils.make_disjoint_window, lm_utils.get_rolling_token_windows(
                    token_list=self.tok_encode(text), prefix_token=self.prefix_token_id,
                    max_seq_len=self._max_length, context_len=1)):
                windows.append((None,) + window)
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, (logp, _) in zip(owner, self._loglikelihood_tokens(windows)):
            totals[i] += logp
        return totals

    # -- generation ----------------------------------------------------------------------------------------------
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Each request's completion, the requests grouped by their generation settings (one decode loop each)."""
        groups: dict[str, list[int]] = {}
        for i, req in enumerate(requests):
            groups.setdefault(repr(sorted(req.args[1].items(), key=str)), []).append(i)
        out = [""] * len(requests)
        eos_text = self.tokenizer.decode([self._eot])
        for members in groups.values():
            kwargs = normalize_gen_kwargs(requests[members[0]].args[1], self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
            new = int(kwargs.pop("max_gen_toks"))
            if not 0 < new < self._max_length:
                raise ConfigError(f"max_gen_toks={new} must be in [1, {self._max_length}) (the model's context)")
            contexts = [self.tok_encode(requests[i].args[0])[-(self._max_length - new):] or [self._eot]
                        for i in members]
            for start in range(0, len(members), self.batch_size):
                part = contexts[start:start + self.batch_size]
                for i, ids in zip(members[start:start + self.batch_size],
                                  self._decode(part, new, kwargs, seed=self.seed + start // self.batch_size)):
                    out[i] = postprocess_generated_text(self.tok_decode(ids), until, None)
        return out

    def _decode(self, prompts: list[list[int]], new: int, kwargs: dict, seed: int) -> list[list[int]]:
        """``new`` tokens (or up to end-of-text) after each prompt; the batch is filled to ``batch_size`` rows with
        copies of its first prompt and left-padded to a power-of-two width."""
        from ptm_jax.families import registry

        generate = registry.get(self.cfg.family).inspection.generate
        greedy = not kwargs.get("do_sample") or float(kwargs.get("temperature") or 0.0) == 0.0
        filled = prompts + [prompts[0]] * (self.batch_size - len(prompts))
        width = bucket(max(map(len, prompts)), self._max_length - new)
        rows = generate(self.params, self.cfg, filled, new, greedy=greedy,
                        temperature=float(kwargs.get("temperature") or 1.0), top_k=int(kwargs.get("top_k") or 0),
                        top_p=float(kwargs.get("top_p") or 1.0), seed=seed, eos_id=self._eot,
                        max_length=self._max_length, prompt_width=width)
        return rows[:len(prompts)]


def run_tasks(model: str, tasks: list[str], *, include_path: str | None = None, limit: float | None = None,
              num_fewshot: int | None = None, batch_size: int = 8, max_length: int | None = None,
              seed: int = 0, log_samples: bool = False, builtin_tasks: bool = True) -> dict[str, Any]:
    """The harness's ``simple_evaluate`` of the ptm model at ``model`` on ``tasks`` (names, or task groups, known to
    the harness or defined by the YAML files under ``include_path``): its results dict. ``builtin_tasks=False``
    indexes only ``include_path`` (the harness's own 14,000 task files cost about 15 CPU-seconds to index)."""
    from lm_eval import evaluator
    from lm_eval.tasks import TaskManager

    if include_path is not None and not Path(include_path).exists():
        raise ConfigError(f"{include_path}: --include-path not found; pass a folder (or file) of task YAML files")
    if not builtin_tasks and include_path is None:
        raise ConfigError("only the --include-path tasks were asked for, but no --include-path was given")
    manager = TaskManager(include_path=include_path, include_defaults=builtin_tasks)
    unknown = [t for t in tasks if not manager.match_tasks([t])]
    if unknown:
        where = f" nor under {include_path}" if include_path else ""
        raise ConfigError(f"unknown task(s) {', '.join(unknown)}: not among the harness's tasks{where}; pass a task "
                          "name or a folder of task YAML files with --include-path")
    lm = PtmLM(model, batch_size=batch_size, max_length=max_length, seed=seed)
    return evaluator.simple_evaluate(model=lm, tasks=tasks, num_fewshot=num_fewshot, limit=limit,
                                     task_manager=manager, log_samples=log_samples, random_seed=seed,
                                     numpy_random_seed=seed, torch_random_seed=seed, fewshot_random_seed=seed,
                                     bootstrap_iters=0)
