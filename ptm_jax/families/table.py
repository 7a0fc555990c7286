"""The families x parts table, generated from the registry: ``ptm families`` prints it and docs/architecture.md
holds it (tests/test_family_parts.py checks the page against this function, so the page cannot drift from the code).

One row per registered family, one column per part of the contract (``families/parts.py``), each cell naming what the
family fills in that part ('-' for nothing), then the capabilities derived from it.
"""
from __future__ import annotations

from ptm_jax.families import registry
from ptm_jax.families.parts import PARTS

_HEADER = {"pretraining": "pretraining (objectives; tokenizer)", "layout": "parameter layout (trunk/stack)",
           "finetuning": "finetuning (classifier, tasks, heads)", "interop": "interop", "inspection": "inspection",
           "bench": "bench"}


def _cell(fam: registry.Family, part: str) -> str:
    p = getattr(fam, part)
    if part == "pretraining":
        kinds = ", ".join(p.tokenizer_kinds) or "subword"
        own = " (own corpus)" if p.corpus is not None else ""
        return f"{', '.join(f'`{o}`' for o in p.objectives)}; {kinds}{own}"
    if part == "layout":
        if p.trunk is None:
            return "-"
        extra = [h for h, v in (("own groups", p.param_groups), ("own layer names", p.layer_of)) if v is not None]
        return f"`{p.trunk}`" + (f"/`{p.stack}`" if p.stack else "") + (f" ({', '.join(extra)})" if extra else "")
    if part == "finetuning":
        items = (["classifier"] if p.classifier is not None else []) + sorted(p.tasks)
        items += [f"{h} head" for h in sorted(set(p.task_heads) - {"sequence_classification"})]
        items += [f"own {k}" for k in sorted(p.task_objectives)]
        items += ["packing"] if p.packs_examples else []
        items += [f"[{sec.name}]" for sec in p.sections]
        return ", ".join(items) or "-"
    if part == "interop":
        items = [f"HF {'/'.join(p.hf.model_types) or '(no model_type of its own)'}"] if p.hf is not None else []
        return ", ".join(items + sorted(p.importers)) or "-"
    if part == "inspection":
        hooks = ("generate", "perplexity", "word_vectors", "subword_vectors", "word_features", "word_encoder",
                 "attention_maps", "vector_distance")
        return ", ".join(h for h in hooks if getattr(p, h) is not None) or "-"
    items = [n for n, v in (("FLOPs", p.flops), ("batch", p.synthetic_batch)) if v is not None]
    items += [f"variant {v}" for v in sorted(p.variants)]
    return ", ".join(items + ([f"{p.corpus} corpus"] if p.corpus != "synthetic" else [])) or "-"


def parts_table() -> str:
    """The Markdown table of every registered family (name order) against the six parts and its capabilities."""
    head = ["family", *(_HEADER[p] for p in PARTS), "capabilities"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, fam in sorted(registry.families().items()):
        cells = [f"`{name}`", *(_cell(fam, p) for p in PARTS), ", ".join(sorted(fam.capabilities)) or "-"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"
