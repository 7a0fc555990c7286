"""CoVe's MT-LSTM (ptm_jax/families/cove): the encoder against salesforce/cove's ``MTLSTM`` structure in PyTorch,
training steps of the whole encoder-decoder against the same network in PyTorch (tests/cove_reference.py), the
parallel corpus's checks, the input vectors and the word features."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import trajectory

from ptm_jax.config import MeshConfig
from ptm_jax.config_loading import load_config
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.families.cove import parallel
from ptm_jax.families.cove.features import word_features
from ptm_jax.families.cove.model import MTLSTM
from ptm_jax.objectives.registry import build_objective
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.stages import prepare_corpus

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

STEPS, LR = 6, 0.5
TINY = ["model.input_vectors=random:8", "model.input_dim=8", "model.hidden_size=6", "model.decoder_size=12",
        "model.target_embed_dim=5", "model.vocab_size=60", "model.dropout=0.0", "data.max_seq_length=8",
        "train.batch_size=4", "train.optimizer=sgd", f"train.learning_rate={LR}", "train.clip_norm=0.0",
        "train.lr_decay=constant", "train.warmup_steps=0", "train.weight_decay=0.0"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The cove_tiny objective at a tiny shape on the generated pair, its first steps (ptm) and initial params."""
    out = tmp_path_factory.mktemp("cove")
    cfg = load_config("cove_tiny", [f"output_dir={out}", f"train.steps={STEPS}", *TINY])
    corpus = prepare_corpus(cfg)
    obj = build_objective(cfg, corpus)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    boxed = obj.init(jax.random.key(3), obj.example_batch(cfg.train.batch_size))
    start = jax.tree.map(np.asarray, nn.unbox(boxed))
    run = trajectory.run_ptm(obj, cfg.train, mesh, STEPS, params=start)  # one compile: the loop's train step
    return cfg, corpus, obj, start, run


def test_encoder_matches_salesforce_mtlstm_in_torch_within_1e_5(tiny):
    import cove_reference as ref

    cfg, _, _, params, run = tiny
    enc = params["params"]["cove"]["encoder"]
    batch = run.batches[0]
    lengths = batch["source_mask"].sum(1)
    assert len(set(lengths.tolist())) > 1  # rows of different lengths: the packed backward pass matters
    ours = MTLSTM(cfg.model).apply({"params": enc}, jnp.asarray(batch["source"]), jnp.asarray(batch["source_mask"]))[0]
    theirs = ref.TorchMTLSTM(cfg.model.input_dim, cfg.model.hidden_size)
    ref.load_encoder(theirs, enc)
    with torch.no_grad():
        outs, _ = theirs(torch.tensor(batch["source"]), torch.tensor(lengths))
    for layer in range(2):
        gap = np.max(np.abs(np.asarray(ours[layer]) - outs[layer].numpy()))
        assert gap < 1e-5, (layer, gap)
    assert np.abs(np.asarray(ours[1])).max() > 0.05  # real states, not zeros


def test_encoder_decoder_trains_like_torch_step_by_step(tiny):
    import cove_reference as ref

    cfg, _, _, params, run = tiny
    m = cfg.model
    model = ref.TorchTranslator(m.input_dim, m.hidden_size, m.decoder_size, m.target_embed_dim, m.vocab_size)
    ref.load_ptm(model, params)
    theirs = ref.train(model, run.batches, LR)
    assert trajectory.loss_gap(run.losses, theirs) < 1e-4, np.abs(run.losses - theirs)
    assert run.losses[-1] < run.losses[0] - 0.05  # it learns
    assert run.losses[0] > 3.0  # about log(60) at init


def test_translation_batches_are_line_aligned_pairs(tiny):
    cfg, corpus, obj, _, run = tiny
    b = run.batches[0]
    tok = corpus.tokenizer
    assert b["source"].shape == (4, 8, 8) and b["target_in"].shape == (4, 8)
    assert (b["target_in"][:, 0] == tok.eos_id).all()  # the start symbol
    np.testing.assert_array_equal(b["target_in"][:, 1:] * (b["target_weights"][:, 1:] > 0),
                                  b["target_out"][:, :-1] * (b["target_weights"][:, 1:] > 0))
    # the generated target is the source reversed and spelt backwards: the first target word is the last source
    # word reversed, for every row whose source fits
    src_words = corpus.train.source
    for row in range(4):
        n = int(b["source_mask"][row].sum())
        first = tok.id_to_token(int(b["target_out"][row, 0]))
        cands = [s for s in src_words if len(s) == n and s[-1][::-1] == first]
        assert first == "<unk>" or cands, (row, first)
    evals = list(obj.eval_batches(4, 0, 1))
    assert sum(float(e["target_weights"][:, 0].sum()) for e in evals) == corpus.eval.num_docs


def test_word_features_are_the_top_encoder_states_per_sentence(tiny):
    cfg, corpus, _, params, _ = tiny
    sents = [["the", "list", "is", "sorted"], ["sorted"], ["a", "list", "of", "words", "is", "here", "now"]]
    feats = word_features(params, cfg.model, corpus.tokenizer, sents, batch_size=4)
    assert [f.shape for f in feats] == [(1, 4, 12), (1, 1, 12), (1, 7, 12)]
    alone = word_features(params, cfg.model, corpus.tokenizer, sents[:1])[0]
    np.testing.assert_allclose(alone, feats[0], atol=1e-6)  # batching and padding change nothing
    assert np.abs(feats[0][0, 3] - feats[1][0, 0]).max() > 1e-3  # "sorted" in context differs from alone


def test_input_vectors_from_a_word2vec_text_file(tmp_path):
    path = tmp_path / "vec.txt"
    path.write_text("3 4\nthe 1 0 0 0\ncat 0 1 0 0\nsat 0 0 1 0.5\n", encoding="utf-8")
    cfg = load_config("cove_tiny", [f"model.input_vectors={path}", "model.input_dim=4"]).model
    got = parallel.input_vectors(cfg, ["The", "sat", "dog"])
    np.testing.assert_array_equal(got, [[1, 0, 0, 0], [0, 0, 1, 0.5], [0, 0, 0, 0]])  # lower-cased; unknown: zeros
    wide = load_config("cove_tiny", [f"model.input_vectors={path}", "model.input_dim=5"]).model
    with pytest.raises(ConfigError, match=r"4-dimensional vectors but model.input_dim=5"):
        parallel.input_vectors(wide, ["the"])
    rand = load_config("cove_tiny", []).model
    a, b = parallel.input_vectors(rand, ["cat", "cat"]), parallel.input_vectors(rand, ["cat"])
    np.testing.assert_array_equal(a[0], b[0])
    assert abs(float(np.linalg.norm(a[0])) - 1.0) < 0.6  # N(0, 1/dim) per dimension


def test_parallel_files_of_different_line_counts_are_refused_with_one_line(tmp_path):
    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    src.write_text("a dog runs .\ntwo men sit .\na cat .\n", encoding="utf-8")
    tgt.write_text("ein hund läuft .\nzwei männer sitzen .\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        parallel.read_parallel(str(src), str(tgt))
    msg = str(e.value)
    assert "\n" not in msg and f"{src} has 3 lines but {tgt} has 2" in msg and "line-aligned" in msg


def test_a_corpus_with_no_target_side_is_refused_with_one_line(tmp_path):
    src = tmp_path / "train.en"
    src.write_text("a dog runs .\ntwo men sit .\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"{src} \(2 lines\) has no target side"):
        parallel.read_parallel(str(src), "")
    cfg = load_config("cove_tiny", [f"data.source_train={src}", f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match=r"data.target_train is empty: data.source_train=.* has no target side"):
        prepare_corpus(cfg)
    with pytest.raises(DataError, match=r"the target file .*missing.de does not exist"):
        parallel.read_parallel(str(src), str(tmp_path / "missing.de"))
    with pytest.raises(ConfigError, match=r"data.source_eval=.* and data.target_eval='': give both sides"):
        load_config("cove_tiny", [f"data.source_eval={src}"])


def test_bad_model_fields_are_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"model.decoder_init='encoder' needs model.decoder_size = 2 x hidden_size"):
        load_config("cove_tiny", ["model.decoder_size=20"]).model.validate()
    with pytest.raises(ConfigError, match=r"model.input_vectors is empty"):
        parallel.input_vectors(load_config("cove", []).model, ["a"])
