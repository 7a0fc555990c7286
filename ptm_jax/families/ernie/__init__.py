"""ERNIE 1.0 (Sun et al. 2019, "ERNIE: Enhanced Representation through Knowledge Integration") as one family
package: BERT's network with knowledge masking, i.e. whole phrase and entity units masked in three stages
(basic, phrase, entity). ``config.py`` the sections, ``units.py`` the unit annotations (lexicon, word2phrase PMI
phrases, span file) built once beside the token cache (``Family.artifacts["units"]``), ``data.py`` the tf.data
stream (BERT's, via ``families/bert/mlm_nsp_data.py``), ``model.py`` the network (BERT's modules under the trunk
key "ernie"), ``objective.py`` the objectives ``ernie_mlm`` and ``ernie_mlm_nsp``.

``hf.py`` imports and exports transformers' ``model_type = "ernie"`` folders (BERT's tensors under the prefix
"ernie.", task-type embeddings off). Not here yet: finetuning heads.
Importing this package registers it (``ptm_jax/families/registry.py``).
"""
from __future__ import annotations

from typing import Any

from ptm_jax.families.ernie.config import ErnieConfig, ErnieDataConfig
from ptm_jax.families.ernie.model import TRUNK
from ptm_jax.families.registry import Family, HfConverter, register


def _objective(cfg: Any, corpus: Any):
    from ptm_jax.families.ernie.objective import ErnieObjective

    return ErnieObjective(cfg, corpus)


def _units(cfg: Any, corpus: Any, directory: Any):
    from ptm_jax.families.ernie.units import build_units

    return build_units(cfg, corpus, directory)


def _hf() -> HfConverter:
    def import_dir(hf_dir, out, head=None, overwrite=False):
        from ptm_jax.families.ernie import hf

        return hf.import_dir(hf_dir, out, head=head, overwrite=overwrite)

    def export_dir(src, out, overwrite=False):
        from ptm_jax.families.ernie import hf

        return hf.export_dir(src, out, overwrite=overwrite)

    def load(hf_dir):
        from ptm_jax.families.ernie import hf

        return hf.load(hf_dir)

    return HfConverter(model_types=("ernie",), import_dir=import_dir, export_dir=export_dir, load=load)


def _infer_head(params: dict) -> str:
    if "mlm" in params:
        return "pretraining" if "nsp" in params else "masked_lm"
    return "encoder"


FAMILY = register(Family(
    name="ernie",
    model_config=ErnieConfig,
    data_config=ErnieDataConfig,
    objectives={"ernie_mlm": _objective, "ernie_mlm_nsp": _objective},
    specials=("pad", "cls", "sep", "mask"),
    artifacts={"units": _units},
    trunk=TRUNK,
    stack="encoder",
    heads=("encoder", "pretraining", "masked_lm"),
    infer_head=_infer_head,
    hf=_hf(),
    tiny_preset="ernie_tiny",
))
