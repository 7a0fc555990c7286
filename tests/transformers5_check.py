"""Run by tests/test_hf_cli.py with the python of an environment holding transformers 5, torch, sentencepiece and
protobuf (XLNet's spiece.model is converted with them; the variable PTM_TRANSFORMERS5_PYTHON names it): loads each exported folder with transformers' PyTorch class, writes its logits on the
inputs the test gives, and re-saves model and tokenizer with ``save_pretrained`` (the layout version 5 writes), with
the ids its tokenizer gives for the test's texts.

    python transformers5_check.py SPEC.json      (SPEC: [{hf, architecture, inputs: npz, out: folder, texts}])
Prints one JSON line per case; the test compares the numbers with ptm_jax's.
"""
import json
import sys

import numpy as np
import torch
import transformers


def main(spec_file: str) -> int:
    torch.set_num_threads(1)
    for case in json.load(open(spec_file)):
        cls = getattr(transformers, case["architecture"])
        model, loading = cls.from_pretrained(case["hf"], output_loading_info=True)
        model.eval()
        with np.load(case["inputs"]) as z:
            inputs = {k: torch.tensor(z[k]) for k in z.files}
        with torch.no_grad():
            out = model(**inputs)
        logits = {k: getattr(out, k).numpy() for k in ("logits", "prediction_logits", "seq_relationship_logits")
                  if getattr(out, k, None) is not None}
        np.savez(case["out"] + ".logits.npz", **logits)
        model.save_pretrained(case["out"])
        tok = transformers.AutoTokenizer.from_pretrained(case["hf"])
        tok.save_pretrained(case["out"])
        ids = tok(case["texts"], add_special_tokens=False)["input_ids"]
        print(json.dumps({"hf": case["hf"], "version": transformers.__version__, "class": type(model).__name__,
                          "tokenizer": type(tok).__name__, "missing": list(loading["missing_keys"]),
                          "unexpected": list(loading["unexpected_keys"]), "ids": ids}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
