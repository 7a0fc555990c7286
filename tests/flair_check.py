"""Run by tests/test_flair.py in a process whose path holds flairNLP/flair (``.venv/flair``, see
``tests/flair_env.py``): flair's own ``LanguageModel`` pair loaded with ptm_jax's weights and its
``FlairEmbeddings`` over the given sentences. Reads a .npz spec (weights per direction, the character list in id
order with the eos character as flair's document delimiter "\\n", the sentences, with_whitespace) and writes the
embeddings [forward; backward] per sentence, concatenated over the words, to the output .npz."""
from __future__ import annotations

import json
import sys

import numpy as np
import torch


def main(spec_path: str, out_path: str) -> None:
    from flair.data import Dictionary, Sentence
    from flair.embeddings import FlairEmbeddings
    from flair.models import LanguageModel

    spec = np.load(spec_path, allow_pickle=False)
    meta = json.loads(str(spec["meta"]))
    chars = meta["chars"]
    dictionary = Dictionary(add_unk=False)
    for c in chars:
        dictionary.add_item(c)
    embeddings = []
    for direction in ("forward", "backward"):
        lm = LanguageModel(dictionary, direction == "forward", meta["hidden"], 1, meta["embed"], dropout=0.0)
        w = {k[len(direction) + 1:]: torch.tensor(spec[k]) for k in spec.files if k.startswith(direction + "/")}
        state = {"encoder.weight": w["embedding"], "rnn.weight_ih_l0": w["kernel"].T,
                 "rnn.weight_hh_l0": w["recurrent_kernel"].T, "rnn.bias_ih_l0": w["bias"],
                 "rnn.bias_hh_l0": torch.zeros_like(w["bias"]),
                 "decoder.weight": w["decoder_kernel"].T, "decoder.bias": w["decoder_bias"]}
        lm.load_state_dict(state)
        name = f"{len(embeddings)}-{direction}"  # flair concatenates a token's embeddings in order of their names
        embeddings.append(FlairEmbeddings(lm, with_whitespace=meta["with_whitespace"], name=name))
    out = []
    for words in meta["sentences"]:
        sentence = Sentence(words)
        for e in embeddings:
            e.embed(sentence)
        out.append(torch.stack([t.get_embedding() for t in sentence.tokens]).detach().numpy())
    np.savez(out_path, *out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
