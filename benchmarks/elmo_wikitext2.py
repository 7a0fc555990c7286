"""ELMo's biLM (ptm_jax/families/elmo) next to a plain LSTM language model of the same size, on the same CPU
budget, on WikiText-2,
then ELMo's contextual nearest neighbours of "play".

Data: ../shared/data/corpus/wikitext-2-tokenized holds only the valid and test splits, so both models train on
valid.txt (217,646 tokens) and are scored on test.txt (245,569 tokens); the word vocabulary is valid.txt's
(every word, ``data/word_vocab.py``), test words outside it are ``<unk>`` (so the figures are not comparable
with published WikiText-2 perplexities, which use the 33,278-word train vocabulary and far more training).
Both read the same rows: ``families/elmo/data.py`` lanes of ``--unroll`` tokens, ``--batch`` lanes, LSTM state
carried across batches in training and in evaluation.

The models (same LSTM shapes per direction, same softmax, same optimizer, same seconds of training):

* biLM: ELMo's char-CNN (filters ``--filters``, 1 highway layer, projection to P) shared by a forward and a
  backward 2-layer LSTMP (H cells, projection P, clip 3, residual on layer 2), one shared softmax; the loss is
  0.5 (forward + backward);
* plain LSTM: a word embedding [V, P] -> the same forward 2-layer LSTMP -> the same softmax (forward only).

Both train with the sampled softmax (``--num-sampled`` log-uniform classes, ``families/elmo/softmax.py``),
Adagrad lr 0.2 (initial accumulator 1.0) with global-norm clip 10 (bilm-tf's ``training.py``), dropout 0.1,
for ``--seconds`` of CPU time of this process each (``time.process_time``, all threads; compilation excluded;
one model after the other, so a CPU budget rather than wall time keeps the comparison fair under a varying
load).
The baseline is a unigram model of valid.txt (add-one counts, each document's end an ``<eos>``), scored on the
same test tokens. Evaluation is the full softmax over the test split (``--eval-batches`` K: the first K x unroll tokens of
each lane, the lanes spread evenly over the split): perplexity = exp(mean CE); the biLM's forward and
backward perplexities are given apart and as exp of their mean CE.

The "play" example (Peters et al. 2018 Table 4): every occurrence of "play" in valid+test sentences gets
the biLM's top-layer feature (``Inspection.word_features``); for each query occurrence the nearest other occurrences
(cosine) are listed with their sentences: a sense-aware model puts sports uses near sports uses and stage
uses near stage uses.

    python benchmarks/elmo_wikitext2.py --seconds 480 --out runs/elmo_wikitext2.json --save runs/elmo_wt2
    python benchmarks/elmo_wikitext2.py --seconds 45 --eval-batches 40 --play-sentences 30   # docs/benchmarks.md
    python benchmarks/elmo_wikitext2.py --play-only runs/elmo_wt2     # senses of "play" of a saved model, any family

The "play" part also scores the sense split: 101 occurrences hand-labelled (``SENSES``); for the sports and
stage-play ones, how often the nearest other occurrence has the same sense, per layer, against chance.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "corpus" / "wikitext-2-tokenized"


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=480.0,
                    help="training budget per model in CPU seconds of this process (all its threads)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--unroll", type=int, default=20)
    ap.add_argument("--lstm-dim", type=int, default=512)
    ap.add_argument("--proj", type=int, default=128)
    ap.add_argument("--filters", default="1:32,2:32,3:64,4:128,5:128")
    ap.add_argument("--num-sampled", type=int, default=1024)
    ap.add_argument("--eval-batches", type=int, default=0,
                    help="score only the first K eval batches (K x unroll tokens of each of the --batch lanes "
                         "spread over test.txt; 0: the whole split)")
    ap.add_argument("--work", default="/tmp/elmo_wikitext2", help="vocabulary and token caches")
    ap.add_argument("--play-sentences", type=int, default=40, help="sentences with 'play' to embed (0: skip)")
    ap.add_argument("--out")
    ap.add_argument("--save", default="", help="write the trained biLM as a params directory (with the word "
                    "vocabulary): `ptm embed --layers`, `ptm context-neighbors`, feature heads read it")
    ap.add_argument("--models", nargs="+", choices=["bilm", "plain"], default=["bilm", "plain"],
                    help="which models to train (bilm alone: a longer feature extractor without its baseline)")
    ap.add_argument("--play-only", default="", metavar="MODEL",
                    help="train nothing: the 'play' senses and neighbours of a saved biLM (a --save directory)")
    return ap.parse_args()


def unigram_perplexity(caches, vocab) -> float:
    """exp of the mean negative log-probability of the test tokens (and an <eos> per document) under valid's
    add-one unigram distribution."""
    import numpy as np

    def counts(c):
        n = sum(np.bincount(np.asarray(s.tokens), minlength=vocab.vocab_size) for s in c._shards).astype(np.float64)
        n[vocab.eos_id] += c.num_docs
        return n

    p = counts(caches["valid"]) + 1.0
    p /= p.sum()
    test = counts(caches["test"])
    return float(np.exp(-(test * np.log(p)).sum() / test.sum()))


def main() -> None:
    args = parse()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.path.insert(0, str(ROOT))
    if args.play_only:
        from ptm_jax.evaluate.features import load_model

        params, mcfg, tokenizer = load_model(args.play_only)
        result = {"model": args.play_only, "play": play_neighbours(params, mcfg, args.play_sentences, tokenizer)}
        text = json.dumps(result, indent=1)
        Path(args.out).write_text(text) if args.out else print(text)
        for layer, r in result["play"]["senses_by_layer"].items():
            print(f"layer {layer}: balanced nearest-same-sense raw {r['raw']['balanced']:.3f}, centred "
                  f"{r['centred']['balanced']:.3f} (chance S {r['raw']['chance_S']:.3f}, T {r['raw']['chance_T']:.3f})",
                  flush=True)
        return
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from ptm_jax.config import DataConfig, RunConfig, TrainConfig
    from ptm_jax.data.cache import build_or_load_cache
    from ptm_jax.data.pretraining.source import SubsetSource
    from ptm_jax.data.word_vocab import build_word_vocab
    from ptm_jax.families.elmo.chars import vocab_char_table
    from ptm_jax.families.elmo.config import ElmoConfig
    from ptm_jax.families.elmo.objective import ElmoObjective
    from ptm_jax.families.elmo.softmax import full_softmax_logits, sampled_softmax_ce
    from ptm_jax.models.lstm import LSTM, zero_carry

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    valid, test = DATA / "valid.txt", DATA / "test.txt"
    vocab = build_word_vocab(valid.read_text(encoding="utf-8").splitlines(), work)
    caches = {n: build_or_load_cache(DataConfig(corpus=str(p), format="lines"), vocab, work / f"cache_{n}")
              for n, p in (("valid", valid), ("test", test))}
    sources = {n: SubsetSource(c, np.arange(c.num_docs)) for n, c in caches.items()}
    filters = [[int(a), int(b)] for a, b in (f.split(":") for f in args.filters.split(","))]
    mcfg = ElmoConfig(vocab_size=vocab.vocab_size, filters=filters, n_highway=1, projection_dim=args.proj,
                      lstm_dim=args.lstm_dim, num_sampled=args.num_sampled, dropout=0.1)
    cfg = RunConfig(model=mcfg, data=DataConfig(max_seq_length=args.unroll, seed=0),
                    train=TrainConfig(batch_size=args.batch, steps=1, progress_bar=False))
    elmo = ElmoObjective(cfg, sources["valid"], sources["test"], vocab, vocab_char_table(vocab, 50))
    G = args.batch

    class PlainLM(nn.Module):
        """Word embedding -> ELMo's forward LSTMP stack -> the shared-shape softmax."""

        @nn.compact
        def __call__(self, ids, mask, carry, train: bool):
            emb = self.param("embedding", nn.initializers.normal(1.0), (mcfg.vocab_size, mcfg.projection_dim))
            x = jnp.take(emb, ids, axis=0)
            new = []
            for i in range(mcfg.n_layers):
                inp = nn.Dropout(mcfg.dropout, deterministic=not train)(x)
                y, c = LSTM(mcfg.lstm_dim, mcfg.projection_dim, cell_clip=3.0, proj_clip=3.0, forget_bias=1.0,
                            name=f"forward_{i}")(inp, mask, carry[i])
                y = y + x if i > 0 else y
                new.append(c)
                x = y
            x = nn.Dropout(mcfg.dropout, deterministic=not train)(x)
            w = self.param("softmax_kernel", nn.initializers.normal(mcfg.projection_dim ** -0.5),
                           (mcfg.vocab_size, mcfg.projection_dim))
            b = self.param("softmax_bias", nn.initializers.zeros, (mcfg.vocab_size,))
            return x, (w, b), new

    plain = PlainLM()

    def plain_loss(params, batch, carry, rng, train):
        ids = batch["fwd_ids"]
        mask = ids[:, :-1] != vocab.pad_id
        top, (w, b), new = plain.apply(params, ids[:, :-1], mask, carry, train,
                                       rngs={"dropout": rng} if train else {})
        wt = batch["target_weights"]
        if train:
            ce = sampled_softmax_ce(top, ids[:, 1:], w, b, jax.random.fold_in(rng, 7), mcfg.num_sampled)
        else:
            ce = optax.softmax_cross_entropy_with_integer_labels(full_softmax_logits(top, w, b), ids[:, 1:])
        total = jnp.sum(ce * wt)
        return total / jnp.maximum(jnp.sum(wt), 1.0), ({"forward": (total, jnp.sum(wt))}, new)

    def elmo_loss(params, batch, carry, rng, train):
        norms = elmo.normalizers(batch)
        loss, terms, new = elmo.loss_carrying(params, batch, carry, rng if train else None, norms, train)
        if train:
            return loss, ({}, new)
        return loss, ({d: terms[f"{d}_loss"] for d in ("forward", "backward")}, new)

    example = {k: jnp.asarray(v) for k, v in elmo.example_batch(G).items()}
    key = jax.random.PRNGKey(0)
    sides = {
        "biLM (ELMo)": (elmo_loss, nn.meta.unbox(elmo.init(key, example)),
                        nn.meta.unbox(elmo.init_carry(G))),
        "plain LSTM": (plain_loss, plain.init(key, example["fwd_ids"][:, :-1], example["fwd_ids"][:, :-1] > 0,
                                              [zero_carry(G, mcfg.lstm_dim, mcfg.projection_dim)] * 2, False),
                       [zero_carry(G, mcfg.lstm_dim, mcfg.projection_dim) for _ in range(2)]),
    }
    tx = optax.chain(optax.clip_by_global_norm(10.0), optax.adagrad(0.2, initial_accumulator_value=1.0))
    results: dict = {"machine_load_at_start": os.getloadavg(), "vocab_size": vocab.vocab_size, "args": vars(args),
                     "unigram_perplexity": unigram_perplexity(caches, vocab)}
    print("unigram perplexity", results["unigram_perplexity"], flush=True)
    trained = {}
    picked = {"biLM (ELMo)": "bilm", "plain LSTM": "plain"}
    for name, (loss_fn, params, carry0) in sides.items():
        if picked[name] not in args.models:
            continue
        n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))

        @jax.jit
        def step(params, opt, carry, batch, rng, loss_fn=loss_fn):
            (loss, (_, new)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, carry, rng, True)
            updates, opt = tx.update(grads, opt, params)
            return optax.apply_updates(params, updates), opt, jax.lax.stop_gradient(new), loss

        opt = tx.init(params)
        carry = carry0
        batches = elmo.train_batches(0, G, 0, 1)
        first = {k: jnp.asarray(v) for k, v in next(batches).items()}
        t0 = time.time()
        jax.block_until_ready(step(params, opt, carry, first, key))       # compile, not timed
        compile_s = time.time() - t0
        steps, losses, t0, c0 = 0, [], time.time(), time.process_time()
        while time.process_time() - c0 < args.seconds:      # a CPU-time budget: fair under a varying load
            batch = {k: jnp.asarray(v) for k, v in next(batches).items()}
            params, opt, carry, loss = step(params, opt, carry, batch, jax.random.fold_in(key, steps))
            steps += 1
            if steps % 50 == 0:
                losses.append(float(loss))
                print(f"{name}: step {steps} sampled loss {losses[-1]:.3f} ({time.time() - t0:.0f} s)", flush=True)
        train_s, train_cpu_s = time.time() - t0, time.process_time() - c0

        @jax.jit
        def eval_step(params, carry, batch, loss_fn=loss_fn):
            _, (terms, new) = loss_fn(params, batch, carry, None, False)
            return terms, new

        sums: dict = {}
        carry = jax.tree.map(jnp.zeros_like, carry0)
        t1 = time.time()
        for k, b in enumerate(elmo.eval_batches(G, 0, 1)):
            if args.eval_batches and k >= args.eval_batches:
                break
            terms, carry = eval_step(params, carry, {k: jnp.asarray(v) for k, v in b.items()})
            for d, (num, den) in terms.items():
                s = sums.setdefault(d, [0.0, 0.0])
                s[0] += float(num)
                s[1] += float(den)
        row = {"params": n_params, "compile_s": round(compile_s, 1), "train_wall_s": round(train_s, 1),
               "train_cpu_s": round(train_cpu_s, 1), "steps": steps,
               "train_tokens_seen": steps * G * args.unroll, "last_sampled_losses": losses[-3:],
               "eval_s": round(time.time() - t1, 1), "eval_tokens": int(next(iter(sums.values()))[1])}
        for d, (num, den) in sums.items():
            row[f"{d}_perplexity"] = math.exp(num / den)
        if len(sums) == 2:
            row["mean_perplexity"] = math.exp(sum(s[0] for s in sums.values()) / sum(s[1] for s in sums.values()))
        results[name] = row
        trained[name] = params
        print(name, json.dumps(row), flush=True)
    results["machine_load_at_end"] = os.getloadavg()

    if args.save and "biLM (ELMo)" in trained:
        from ptm_jax.export.params import save_params

        tree = trained["biLM (ELMo)"]
        save_params(args.save, tree.get("params", tree), mcfg, "language_model", overwrite=True,
                    extra={"tokenizer": {"kind": "word", "lower_case": False}}, tokenizer_files=[vocab.path])
    if args.play_sentences and "biLM (ELMo)" in trained:
        results["play"] = play_neighbours(trained["biLM (ELMo)"], mcfg, args.play_sentences)
    print(json.dumps(results, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2))


SENSES = ("SSSSSSATTTAOSSSSSSSSSSSSSSSSSSSOOMOMMAOOATAATTTTTTTOSSSSSSSM"
          "OSSSOOSSSOOOSSSSSSSSSSSSSSSTTTTAATSOSSSTA")
"""Hand labels of the sense of the first "play" in each of the 101 sentences that :func:`play_sentences` finds
(valid, then test): S sports or a game (to play a match, a team's play, a play called in a game), T a stage play
(the drama), A acting a role (to play a part), M music, O anything else (video games, "play a role in", word
play). :func:`sense_agreement` scores the S and T occurrences, the two senses of Peters et al. 2018 Table 4."""


def play_sentences(limit: int = 0) -> list[list[str]]:
    """The sentences of valid.txt then test.txt (split at " . ") that hold "play", 5 to 60 words."""
    sents = []
    for split in ("valid", "test"):
        for line in (DATA / f"{split}.txt").read_text(encoding="utf-8").splitlines():
            for s in line.split(" . "):
                words = s.split()
                if "play" in words and 5 <= len(words) <= 60:
                    sents.append(words)
    return sents[:limit] if limit else sents


def sense_agreement(vecs, senses: str, center=None) -> dict:
    """Over the S and T occurrences: for each, is its nearest other S/T occurrence (cosine of ``vecs``, minus
    ``center`` when given) of the same sense? Per sense and balanced (the mean of the two); with chance levels
    (a random other occurrence)."""
    import numpy as np

    keep = [i for i, c in enumerate(senses) if c in "ST"]
    x = np.asarray(vecs, np.float64)[keep]
    if center is not None:
        x = x - center
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    sim = x @ x.T
    np.fill_diagonal(sim, -np.inf)
    lab = np.array([senses[i] for i in keep])
    hit = lab[np.argmax(sim, axis=1)] == lab
    out = {"occurrences": {c: int((lab == c).sum()) for c in "ST"}}
    for c in "ST":
        out[f"nearest_same_{c}"] = round(float(hit[lab == c].mean()), 4)
        out[f"chance_{c}"] = round(float(((lab == c).sum() - 1) / (len(lab) - 1)), 4)
    out["balanced"] = round((out["nearest_same_S"] + out["nearest_same_T"]) / 2, 4)
    return out


def play_neighbours(params, mcfg, limit: int, tokenizer=None) -> dict:
    """Every "play" occurrence's features (all layers of any model with word features; ELMo ignores
    ``tokenizer``); the sense agreement of each layer, raw and centred on the
    mean feature of all the sentences' words; per query (the first ``limit`` sentences), its 3 nearest other
    occurrences by the centred top layer, with their sentences."""
    import numpy as np

    from ptm_jax.evaluate.features import word_features

    sents = play_sentences()
    if len(sents) != len(SENSES):
        raise SystemExit(f"{len(sents)} 'play' sentences but {len(SENSES)} sense labels: the data changed")
    feats = word_features(params, mcfg, tokenizer, sents, batch_size=16)
    vecs = np.stack([f[:, s.index("play")] for f, s in zip(feats, sents)])           # [N, L, D]
    means = np.concatenate([f for f in feats], axis=1).mean(axis=1)                  # [L, D] over all words
    layers = {}
    for layer in range(vecs.shape[1]):
        layers[str(layer)] = {"raw": sense_agreement(vecs[:, layer], SENSES),
                              "centred": sense_agreement(vecs[:, layer], SENSES, means[layer])}
    top = vecs[:, -1] - means[-1]
    top = top / np.linalg.norm(top, axis=1, keepdims=True)
    sim = top @ top.T
    np.fill_diagonal(sim, -2)
    raw = vecs[:, -1] / np.linalg.norm(vecs[:, -1], axis=1, keepdims=True)
    out = []
    for i, s in enumerate(sents[:limit]):
        near = np.argsort(-sim[i])[:3]
        out.append({"sentence": " ".join(s), "sense": SENSES[i],
                    "nearest_centred": [[round(float(sim[i, j]), 3), SENSES[j], " ".join(sents[j])] for j in near]})
    return {"senses_by_layer": layers, "raw_top_layer_cosine_range": [round(float((raw @ raw.T).min()), 4), 1.0],
            "queries": out}


if __name__ == "__main__":
    main()
