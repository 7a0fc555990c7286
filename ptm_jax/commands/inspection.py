"""`ptm attention | probe | context-neighbors | vector-map`: looking inside models.

The maps, probes and neighbours are ``evaluate/attention_maps.py``, ``evaluate/probing.py`` and
``evaluate/word_maps.py``; here are the handlers (each returns an exit code and raises ``PtmError`` subclasses for
user errors), their arguments and the printing of the results.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ptm_jax.errors import ConfigError


def _ints(text: str | None, what: str) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ConfigError(f"--{what}={text!r}: expected comma-separated integers such as 0,3,5") from None


def cmd_attention(args: argparse.Namespace) -> int:
    from ptm_jax.evaluate.attention_maps import attention_maps, head_view_html, save_png
    from ptm_jax.evaluate.features import load_model

    params, cfg, tok = load_model(args.model)
    layers, n = _ints(args.layers, "layers"), int(getattr(cfg, "num_layers", 0))
    for x in layers or []:
        if x == 0 or not -n <= x <= n:
            raise ConfigError(f"--layers {x}: the model has layers 1..{n} (-1 = the last; 0 is not a layer)")
    layers = [x - 1 if x > 0 else x for x in layers] if layers else None
    tokens, probs, lay, hd = attention_maps(params, cfg, tok, args.text, layers=layers,
                                            heads=_ints(args.heads, "heads"))
    out = Path(args.out)
    title = f"{args.name or Path(str(args.model).rstrip('/')).name}: {args.text[:80]}"
    png = save_png(tokens, probs, lay, hd, out / "attention.png", title)
    page = head_view_html(tokens, probs, lay, hd, out / "attention.html", title)
    print(json.dumps({"tokens": tokens, "layers": [x + 1 for x in lay], "heads": hd, "png": str(png),
                      "html": str(page)}, indent=2))
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from ptm_jax import fs
    from ptm_jax.evaluate.features import load_model, supports_features
    from ptm_jax.evaluate.plots import plot_layer_curves
    from ptm_jax.evaluate.probing import ProbeSettings, parse_tasks, probe, probe_curves

    tasks = parse_tasks(args.task)
    params, cfg, tok = load_model(args.model)
    if not supports_features(cfg):
        raise ConfigError(f"{args.model}: model.family={cfg.family!r} gives no word features to probe")
    settings = ProbeSettings(steps=args.steps, batch_size=args.probe_batch_size, learning_rate=args.lr,
                             seed=args.seed)
    result = {"model": str(args.model), "family": cfg.family,
              **probe(params, cfg, tok, args.data_dir, tasks, train_sentences=args.train_sentences,
                      dev_sentences=args.dev_sentences, settings=settings, batch_size=args.batch_size)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    fs.write_text_atomic(out / "probe.json", json.dumps(result, indent=2) + "\n")
    name = args.name or Path(str(args.model).rstrip("/")).name
    plot_layer_curves(probe_curves(result), out / "probe.png", title=f"linear probes per layer: {name} "
                      f"(CoNLL-2003 dev, {result['dev_words']} words)", ylabel="dev accuracy / F1")
    print(json.dumps({t: {k: r[k] for k in ("accuracy", "f1") if k in r} for t, r in result["tasks"].items()},
                     indent=2))
    return 0


def cmd_context_neighbors(args: argparse.Namespace) -> int:
    from ptm_jax.evaluate.features import load_model
    from ptm_jax.evaluate.word_maps import context_neighbors, find_word, read_reference

    params, cfg, tok = load_model(args.model)
    sentence = args.context.split()
    reference = read_reference(args.reference, args.max_sentences)
    hits = context_neighbors(params, cfg, tok, sentence, find_word(sentence, args.word), reference,
                             layer=args.layer, k=args.k, center=args.center)
    if args.json:
        print(json.dumps({"word": args.word, "context": args.context, "neighbors": hits}, indent=2))
    else:
        print(f"{args.word} in: {args.context}")
        for h in hits:
            print(f"  {h['cosine']:.4f}\t{h['word']}\t| {h['sentence'][:100]}")
    return 0


def cmd_vector_map(args: argparse.Namespace) -> int:
    from ptm_jax.evaluate.word_maps import vector_map

    print(json.dumps(vector_map(args.model, args.words, args.out, neighbors=args.neighbors,
                                background=args.background, method=args.method, ignore_case=args.ignore_case),
                     indent=2))
    return 0


def register(subparsers) -> None:
    """Adds ``attention``, ``probe``, ``context-neighbors`` and ``vector-map``, each with ``handler=``."""
    p = subparsers.add_parser(
        "attention", help="attention maps of a sentence as a PNG grid and an interactive HTML head view",
        description="Runs MODEL (a params directory, training run or Hugging Face folder of a family with "
        "attention maps: BERT, GPT, XLNet's content stream) on TEXT and writes OUT/attention.png (one heatmap "
        "per chosen layer and head, queries as rows) and OUT/attention.html (a self-contained head view: no "
        "network needed).")
    p.add_argument("model")
    p.add_argument("text")
    p.add_argument("--layers", default=None, help="comma-separated layers, 1 = the first block, -1 = the last "
                   "(default: all)")
    p.add_argument("--heads", default=None, help="comma-separated heads from 0 (default: all)")
    p.add_argument("--name", default=None, help="model name in the titles (default: the folder's name)")
    p.add_argument("--out", default="attention", help="output folder (default ./attention)")
    p.set_defaults(handler=cmd_attention)

    p = subparsers.add_parser(
        "probe", help="linear probes (POS, chunk, NER) on every layer's frozen word features",
        description="Trains one softmax-regression probe per layer on MODEL's frozen word features (first "
        "subword; layer 0 = embeddings; static vectors as one layer) of the first --train-sentences of "
        "CoNLL-2003 train, for a fixed budget, and reports dev word accuracy per layer (NER: also entity F1). "
        "Writes OUT/probe.json and OUT/probe.png.")
    p.add_argument("model", help="params directory, training run or Hugging Face folder")
    p.add_argument("--task", default="pos,chunk,ner", help="comma-separated: pos, chunk, ner (default all three)")
    p.add_argument("--data-dir", default="../shared/data/conll2003",
                   help="CoNLL-2003 folder with eng.train/eng.testa (default ../shared/data/conll2003)")
    p.add_argument("--train-sentences", type=int, default=2000, help="first N train sentences (default 2000)")
    p.add_argument("--dev-sentences", type=int, default=1000, help="first N dev sentences (default 1000)")
    p.add_argument("--steps", type=int, default=1000, help="Adam steps per probe (default 1000)")
    p.add_argument("--probe-batch-size", type=int, default=512, help="words per probe step (default 512)")
    p.add_argument("--lr", type=float, default=1e-2, help="probe Adam learning rate (default 1e-2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=32, help="sentences per feature forward (default 32)")
    p.add_argument("--name", default=None, help="model name in the plot title (default: the folder's name)")
    p.add_argument("--out", default="probe", help="output folder (default ./probe)")
    p.set_defaults(handler=cmd_probe)

    p = subparsers.add_parser(
        "context-neighbors", help="nearest neighbours of a word in context, over a reference text's words",
        description="Ranks every word occurrence of --reference (one sentence per line) by the cosine of its "
        "layer --layer features with WORD's in the --context sentence, and prints the top K with their sentences.")
    p.add_argument("model", help="params directory, training run or Hugging Face folder")
    p.add_argument("--context", required=True, help="the sentence (words split on whitespace)")
    p.add_argument("--word", required=True, help="the query word (its first occurrence in --context)")
    p.add_argument("--reference", required=True, help="text file, one sentence per line ('-' = stdin)")
    p.add_argument("--max-sentences", type=int, default=2000, help="first N reference lines (0 = all; 2000)")
    p.add_argument("--layer", type=int, default=-1, help="feature layer (0 = embeddings, -1 = last; default -1)")
    p.add_argument("-k", type=int, default=10, help="neighbours to print (default 10)")
    p.add_argument("--center", action="store_true", help="subtract the reference words' mean feature before the "
                   "cosine (compares what occurrences do not share; for anisotropic features)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_context_neighbors)

    p = subparsers.add_parser(
        "vector-map", help="2-D PCA / t-SNE map of static word vectors with chosen words labelled",
        description="Projects the chosen WORDs, their --neighbors nearest words and the --background most "
        "frequent words to 2-D (PCA with numpy; t-SNE needs scikit-learn) and writes a PNG with the chosen "
        "words and their neighbours labelled.")
    p.add_argument("model", help="run or params directory of a static-vector family, or a vector file")
    p.add_argument("words", nargs="+", metavar="WORD")
    p.add_argument("--neighbors", type=int, default=5, help="nearest words added per WORD (default 5)")
    p.add_argument("--background", type=int, default=300, help="most frequent words drawn unlabelled (300)")
    p.add_argument("--method", choices=("pca", "tsne"), default="pca")
    p.add_argument("--ignore-case", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", default="vector_map.png", help="PNG path (default ./vector_map.png)")
    p.set_defaults(handler=cmd_vector_map)
