"""`ptm import-hf | import | export | embed | predict`: weights in and out, and inference on lines of text.

The conversions are ``export/`` and the families' ``Interop`` parts, the batched inference
``export/inference.py`` and the per-layer word features ``evaluate/feature_export.py``; here are the handlers
(each returns an exit code and raises ``PtmError`` subclasses for user errors), their arguments and the writing
of the results.
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import sys
from typing import TYPE_CHECKING, Callable

import numpy as np

from ptm_jax import fs
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.export.inference import classify_texts, embed_texts, read_lines

if TYPE_CHECKING:
    from ptm_jax.export.hf_files import HfExport


# ----------------------------------------------------------------------------------------------------
# Handlers


def _load(model: str):
    from ptm_jax.export.params import load_params, load_tokenizer

    params, cfg, info, tok_dir = load_params(model)
    return params, cfg, info, load_tokenizer(info, tok_dir)


def cmd_import_hf(args: argparse.Namespace) -> int:
    from ptm_jax.export.params import hf_model_type, load_params
    from ptm_jax.families import registry

    fam = registry.hf_family(hf_model_type(args.dir))
    out = fam.interop.hf.import_dir(args.dir, args.out, head=args.head, overwrite=args.force)
    _, cfg, info, _ = load_params(out)
    print(f"imported {args.dir} -> {out}: head {info['head']}, {cfg.num_layers} layers, hidden "
          f"{cfg.hidden_size}, vocab {cfg.vocab_size}" + (f"; dropped {', '.join(info['dropped'])}"
                                                         if info.get("dropped") else ""))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """In a multi-process run every process reads the source; a params directory is written by all of them
    together (orbax), an HF folder or .npz file (plain files) by process 0 alone while the others wait."""
    import jax

    from ptm_jax.parallel.distributed import barrier, initialize

    initialize(args.coordinator, args.num_processes, args.process_id)
    if args.format in ("hf", "npz", "text_vectors", "binary_vectors") and jax.process_count() > 1:
        try:
            return _export(args) if jax.process_index() == 0 else 0
        finally:  # also after an error on process 0: the others must not wait for it until the timeout
            barrier("ptm_export")
    return _export(args)


def _export(args: argparse.Namespace) -> int:
    from ptm_jax.export import params as params_lib

    if args.format in ("text_vectors", "binary_vectors"):
        from ptm_jax.evaluate.vector_loading import export_vectors

        print(export_vectors(args.src, args.out, args.format, force=args.force))
        return 0
    if args.format == "hf":
        from ptm_jax.families import registry

        _, src_cfg, src_info, _ = params_lib.load_params(args.src)
        fam = registry.get(src_cfg.family)
        if src_info["head"] in params_lib.SPINE_HEADS:
            raise ConfigError(f"{args.src}: a {src_info['head']} model (an MT-DNN SAN answer module on the encoder) "
                              "has no Hugging Face architecture; export it with --format params or npz")
        export_hf = registry.require(fam, "interop.hf", "Hugging Face export (--format hf)").export_dir
        print(_export_hf_to(export_hf, args.src, args.out, args.force).summary(args.src))
        return 0
    params, cfg, info, tok_dir = params_lib.load_params(args.src)
    head = info.pop("head")
    if args.format == "npz":
        params_lib.save_npz(args.out, params, cfg, head, info)
    else:
        files = [tok_dir / f for f in (info.get("tokenizer") or {}).get("files", [])] if tok_dir else []
        params_lib.save_params(args.out, params, cfg, head, info, files, overwrite=args.force)
    print(f"exported {args.src} -> {args.out} ({args.format}, head {head})")
    return 0


def _export_hf_to(export_hf: Callable, src: str, out: str, force: bool) -> HfExport:
    """An HF folder at ``out``. On gs:// (no directory rename there) it is built in ``fs.scratch_dir()`` and
    uploaded, the ``COMPLETE`` marker last; the old folder's marker goes first, so a reader never takes a
    half-replaced folder for a finished one."""
    if not fs.is_remote(out):
        return export_hf(src, out, overwrite=force)
    import hashlib
    import shutil

    if fs.exists(out) and any(fs.path(out).iterdir()) and not force:
        raise ConfigError(f"{out} already exists and is not empty; choose another output path or pass --force")
    local = fs.scratch_dir() / f"export-{hashlib.sha256(out.encode()).hexdigest()[:16]}"
    shutil.rmtree(local, ignore_errors=True)
    try:
        report = export_hf(src, local, overwrite=True)
        fs.rmtree(fs.path(out) / fs.MARKER)
        fs.rmtree(out)
        fs.upload_tree(local, out)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return dataclasses.replace(report, out=out)


def _write_embeddings(vectors: np.ndarray, texts: list[str], out: str | None) -> None:
    if out and out.endswith(".npy"):
        buf = io.BytesIO()
        np.save(buf, vectors)
        fs.write_bytes_atomic(out, buf.getvalue())
        return
    if out and not out.endswith(".jsonl"):
        raise ConfigError(f"--out {out}: use a .npy or .jsonl file name (or omit it for JSON lines on stdout)")
    lines = [json.dumps({"text": t, "embedding": [round(float(x), 7) for x in v]}) + "\n"
             for t, v in zip(texts, vectors)]
    if out:
        fs.write_text_atomic(out, "".join(lines))
    else:
        sys.stdout.write("".join(lines))


def cmd_embed(args: argparse.Namespace) -> int:
    if args.layers or args.mix:  # per-word, per-layer features of any family (evaluate/feature_export.py)
        return _embed_layers(args, read_lines(args.input))
    params, cfg, info, tok = _load(args.model)
    st = info.get("sentence_transformers") or {}
    texts = read_lines(args.input)
    vectors = embed_texts(params, cfg, tok, texts, pooling=args.pooling or st.get("pooling", "mean"),
                          max_length=args.max_length or st.get("max_seq_length", 128),
                          batch_size=args.batch_size,
                          normalize=st.get("normalize", False) if args.normalize is None else args.normalize)
    _write_embeddings(vectors, texts, args.out)
    if args.out:
        print(f"{len(texts)} embeddings of size {vectors.shape[1] if vectors.ndim == 2 else 0} -> {args.out}",
              file=sys.stderr)
    return 0


def _embed_layers(args: argparse.Namespace, lines: list[str]) -> int:
    """``ptm embed MODEL FILE --layers ...``: per-word, per-layer features of any family."""
    from ptm_jax.evaluate.feature_export import export_features, write

    arrays = export_features(args.model, lines, layers=args.layers or "all", mix=args.mix, gamma=args.gamma,
                             layer_norm=args.layer_norm, batch_size=args.batch_size,
                             where="<stdin>" if args.input == "-" else args.input)
    what = write(arrays, lines, args.out)
    if args.out:
        print(f"{what} -> {args.out}", file=sys.stderr)
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from ptm_jax.objectives.san_classification import SAN_HEAD

    params, cfg, info, tok = _load(args.model)
    if info["head"] not in ("sequence_classification", SAN_HEAD):
        raise ConfigError(f"{args.model}: is a {info['head']} model; predict needs a finetuned sequence "
                          f"classifier (head sequence_classification, or {SAN_HEAD} from MT-DNN)")
    san = info.get("san") if info["head"] == SAN_HEAD else None
    if info["head"] == SAN_HEAD and (not san or not args.pairs):
        raise ConfigError(f"{args.model}: a {SAN_HEAD} model (MT-DNN's SAN answer module) classifies sentence "
                          + ("pairs: give --pairs and 'premise<TAB>hypothesis' lines" if san else
                             "pairs, but its ptm.json has no 'san' entry (steps, step_dropout); re-save it with "
                             "the MT-DNN job"))
    n = int(info["num_labels"])
    names = [str(x) for x in info.get("label_names") or range(n)]
    lines = read_lines(args.input)
    pairs = None
    if args.pairs:
        split = [line.split("\t", 1) for line in lines]
        bad = [i + 1 for i, s in enumerate(split) if len(s) != 2]
        if bad:
            raise DataError(f"{args.input}:{bad[0]}: --pairs expects 'first<TAB>second' on every line "
                            f"({len(bad)} line(s) lack a tab)")
        lines, pairs = [s[0] for s in split], [s[1] for s in split]
    logits = classify_texts(params, cfg, n, tok, lines, pairs, max_length=args.max_length,
                            batch_size=args.batch_size, san=san)
    if n == 1:
        rows = [(f"{x[0]:.6g}", []) for x in logits]
        header = ["index", "score"]
    else:
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs = z / z.sum(axis=1, keepdims=True)
        rows = [(names[int(np.argmax(p))], [f"{q:.6f}" for q in p]) for p in probs]
        header = ["index", "prediction"] + [f"p_{x}" for x in names]
    if args.out is None:
        sys.stdout.write("".join(f"{label}\n" for label, _ in rows))
        return 0
    fs.write_text_atomic(args.out, "".join("\t".join(r) + "\n" for r in
                                          [header] + [[str(i), label] + ps for i, (label, ps) in enumerate(rows)]))
    print(f"{len(rows)} predictions -> {args.out}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from ptm_jax.families.registry import importers

    known = importers()
    if args.format not in known:
        raise ConfigError(f"ptm import {args.format}: unknown format; known: "
                          f"{', '.join(sorted(known)) or 'none'} (Hugging Face folders: ptm import-hf)")
    family, imp = known[args.format]
    if len(args.files) != len(imp.files):
        raise ConfigError(f"ptm import {args.format} takes {len(imp.files)} file(s), {' '.join(imp.files)}; "
                          f"got {len(args.files)}")
    out = imp.run(*args.files, out=args.out, overwrite=args.force)
    print(f"{args.format} ({family}) -> {out}", file=sys.stderr)
    return 0


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "import-hf": cmd_import_hf, "export": cmd_export, "embed": cmd_embed, "predict": cmd_predict,
    "import": cmd_import}


def register(subparsers) -> None:
    """Adds the subcommands; each parser gets ``handler=`` (call it with the parsed args)."""
    from ptm_jax.export.params import heads
    from ptm_jax.families import registry

    types = ", ".join(t for f in registry.families().values() if f.interop.hf for t in f.interop.hf.model_types)
    p = subparsers.add_parser("import-hf", help=f"convert a local Hugging Face folder ({types}) to a "
                              "params directory",
                              description=f"Reads config.json (model_type {types}), "
                              "model.safetensors (or pytorch_model.bin, weights only) and the tokenizer files; "
                              "writes a ptm_jax params directory.")
    p.add_argument("dir", help="Hugging Face model folder (or a sentence-transformers folder)")
    p.add_argument("--out", required=True, help="params directory to write")
    p.add_argument("--head", choices=heads(), default=None, help="override the head detected from the tensors")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.set_defaults(handler=cmd_import_hf)

    formats = registry.importers()
    p = subparsers.add_parser("import", help="convert another toolkit's weights to a params directory ("
                              + ", ".join(sorted(formats)) + ")", description="Formats: " + "; ".join(
                                  f"{fmt} ({fam}): {' '.join(imp.files)}. {imp.description}"
                                  for fmt, (fam, imp) in sorted(formats.items())))
    p.add_argument("format", help=", ".join(sorted(formats)))
    p.add_argument("files", nargs="+", help="the format's files, in its order (see the description)")
    p.add_argument("--out", required=True, help="params directory to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    p.set_defaults(handler=cmd_import)

    p = subparsers.add_parser("export", help="export a run or params directory (hf | params | npz | "
                              "text_vectors | binary_vectors)")
    p.add_argument("src", metavar="RUN_OR_PARAMS", help="params directory, run output dir, stage dir or "
                   "checkpoints dir (latest step)")
    p.add_argument("--format", choices=("hf", "params", "npz", "text_vectors", "binary_vectors"), default="hf",
                   help="text_vectors / binary_vectors: the static word vectors of a family that has them, in "
                   "word2vec.c's text or binary format (gensim's load_word2vec_format reads both)")
    p.add_argument("--out", required=True, help="output folder (hf, params), .npz file or vector file")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    g = p.add_argument_group("multi-host (auto-detected on Cloud TPU pods and SLURM): every process runs the "
                             "same export command")
    g.add_argument("--coordinator", default=None, help="HOST:PORT of process 0")
    g.add_argument("--num-processes", type=int, default=None)
    g.add_argument("--process-id", type=int, default=None)
    p.set_defaults(handler=cmd_export)

    for name, text in (("embed", "sentence embeddings of each input line"),
                       ("predict", "labels of a finetuned sequence classifier (or an MT-DNN SAN pair model, "
                                   "with --pairs) for each input line")):
        p = subparsers.add_parser(name, help=text, description=text)
        p.add_argument("model", help="params directory, run directory or Hugging Face folder")
        p.add_argument("input", nargs="?", default="-", help="text file, one example per line; '-' = stdin")
        p.add_argument("--out", default=None, help=".npy or .jsonl (embed), .tsv (predict); default stdout"
                       if name == "embed" else "TSV of index, label, probabilities; default: labels on stdout")
        p.add_argument("--batch-size", type=int, default=64)
        p.add_argument("--max-length", type=int, default=None if name == "embed" else 128,
                       help="tokens per example incl. [CLS]/[SEP]")
        if name == "embed":
            p.add_argument("--pooling", choices=("mean", "cls"), default=None,
                           help="default: the model's sentence-transformers pooling, else mean")
            p.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                           help="L2-normalise (default: as the sentence-transformers model does, else off)")
            g = p.add_argument_group("contextual word features (any model with per-layer word features: ELMo, "
                                     "BERT, GPT, XLNet; static vectors as one layer); input: one sentence of "
                                     "whitespace-separated words per line")
            g.add_argument("--layers", default=None, help="'all', 'top' or indices such as 0,2 or -1 (0 = the "
                           "token representation): write each word's features of these layers (--out .npz, "
                           ".hdf5 or .jsonl) instead of sentence embeddings")
            g.add_argument("--mix", default=None, help="combine the layers by ELMo's scalar mix: 'average', "
                           "weights w0,w1,... (softmaxed), or a feature head's feature_model.json (a learned mix)")
            g.add_argument("--gamma", type=float, default=None, help="scale of the mix (default 1, or the learned "
                           "one)")
            g.add_argument("--layer-norm", action="store_true", help="normalise each layer over its sentence's "
                           "words before mixing")
        else:
            p.add_argument("--pairs", action="store_true", help="each line is 'first<TAB>second'")
        p.set_defaults(handler=HANDLERS[name])
