"""One vs two planning passes of ERNIE's stream: BERT's ``local_batches`` run once with the unit
codes as ``annotations`` against the former way (once for the tokens, once more for the codes), interleaved for
3 rounds of 400 local batches of 32 rows; prints the seconds of each round and the ratio of the best rounds.

    python benchmarks/ernie_planning_timing.py RUN/config.json

RUN: an ernie_mlm run's output dir (its token cache and units artifact are reused), e.g. the pretraining run of
tests/test_ernie_finetune.py (40 kB of Pride and Prejudice, WordPiece 800, a 5-line lexicon, max_seq_length 64).
Planning and slicing only, in Python; the tf.data feature build after it is the same either way."""
import json, sys, time
from itertools import islice
from ptm_jax.config import RunConfig
from ptm_jax.config_loading import from_dict
from ptm_jax.data.pretraining.source import SubsetSource
from ptm_jax.families.bert.mlm_nsp_data import local_batches
from ptm_jax.train.stages import prepare_corpus
cfg = from_dict(RunConfig, json.load(open(sys.argv[1])))
c = prepare_corpus(cfg); u = SubsetSource(c.artifacts["units"], c.train.doc_indices)
kw = dict(seed=0, start_index=0, global_batch=32, process_index=0, process_count=1, epochs=None); N = 400
def two():
    for t, k in zip(local_batches(c.train, cfg.data, vocab_size=800, **kw), local_batches(u, cfg.data, vocab_size=8, **kw)):
        yield t | {"a_units": k["a_ids"], "b_units": k["b_ids"]}
def one():
    return local_batches(c.train, cfg.data, vocab_size=800, annotations=u, annotation_name="units", **kw)
res = {"two": [], "one": []}
for r in range(3):
    for name, f in (("two", two), ("one", one)):
        t0 = time.perf_counter(); n = sum(1 for _ in islice(f(), N)); res[name].append(time.perf_counter() - t0)
print({k: [round(x, 2) for x in v] for k, v in res.items()}, "speed-up", round(min(res["two"]) / min(res["one"]), 2))
