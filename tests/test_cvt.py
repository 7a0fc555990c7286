"""Cross-view training (finetune.job=cvt, ptm_jax/jobs/cvt; Clark et al. 2018): the auxiliary modules' views are
restricted as Sec. 3.1 says, the losses and 20 alternating training steps equal a PyTorch reference written from
the paper, the job runs through `ptm finetune` and `ptm eval` scores its kept model as recorded, and bad input is
refused with one error line naming the field."""
from __future__ import annotations

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.config_loading import load_config


def _conll_head(path, sentences: int) -> str:
    """The first ``sentences`` sentences of a CoNLL-2003 file (its -DOCSTART- line kept)."""
    out, seen = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip() and len(out) > 2:
                seen += 1
                if seen > sentences:
                    break
            out.append(line)
    return "".join(out)


@pytest.fixture
def conll(tmp_path, shared_data):
    """A CoNLL-2003 folder of the first 24 / 12 / 12 sentences of eng.train / testa / testb."""
    data = tmp_path / "conll"
    data.mkdir()
    for name, n in (("eng.train", 24), ("eng.testa", 12), ("eng.testb", 12)):
        (data / name).write_text(_conll_head(shared_data / "conll2003" / name, n))
    return data


def _text(tmp_path, shared_data) -> str:
    """About 400 lines of WikiText-2 (raw text with headings and ' @-@ ')."""
    lines = (shared_data / "corpus" / "wikitext-2-tokenized" / "valid.txt").read_text().splitlines()[:400]
    path = tmp_path / "wiki.txt"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _tiny_tagger(vocab=30, dim=6, labels=5):
    from ptm_jax.jobs.cvt.model import CvtTagger
    from ptm_jax.models.text_heads import WordInputs

    return CvtTagger(WordInputs(vocab, dim, name="inputs"), labels, 0.0, 5, 4, 7)


def test_future_and_past_modules_never_read_their_own_or_the_far_side_words():
    """Perturbing the words at positions >= t leaves the future module's prediction at t bit-identical (it reads
    fwd_1^{t-1}), and positions <= t leave the past module's (bwd_1^{t+1}); forward and backward read up to and
    from t. The gradients of each module's output at t with respect to the word vectors agree: zero exactly on
    the positions its view excludes, non-zero on those it reads. Padding (positions 7, 8) never matters."""
    model = _tiny_tagger()
    T, n = 9, 7
    ids = np.array([[3, 8, 2, 11, 5, 17, 9, 0, 0]], np.int32)
    mask = (np.arange(T) < n).astype(np.int32)[None]
    params = nn.meta.unbox(model.init(jax.random.key(0), {"ids": ids, "mask": mask}))
    run = jax.jit(lambda i: model.apply(params, {"ids": i, "mask": mask}))
    base = run(ids)
    for t in range(n):
        after, before = ids.copy(), ids.copy()
        after[0, t:n] = 20 + np.arange(n - t)  # words t.. changed
        before[0, :t + 1] = 20 + np.arange(t + 1)  # words ..t changed
        a, b = run(after), run(before)
        np.testing.assert_array_equal(a["future"][0, t], base["future"][0, t])
        np.testing.assert_array_equal(b["past"][0, t], base["past"][0, t])
        if t + 1 < n:
            later = ids.copy()
            later[0, t + 1:n] = 25
            np.testing.assert_array_equal(run(later)["forward"][0, t], base["forward"][0, t])
            assert not np.allclose(run(later)["primary"][0, t], base["primary"][0, t])
        assert not np.allclose(a["forward"][0, t], base["forward"][0, t])  # the forward module reads word t
        assert not np.allclose(b["backward"][0, t], base["backward"][0, t])
        if t > 0:
            assert not np.allclose(a["past"][0, t - 1], base["past"][0, t - 1])  # past at t - 1 reads word t
            earlier = ids.copy()
            earlier[0, :t] = 25
            np.testing.assert_array_equal(run(earlier)["backward"][0, t], base["backward"][0, t])
    # the same through gradients of each module's summed logits at t = 3 with respect to the word vectors (the
    # sentence's words are distinct rows of the table; row 0 is the padding's)
    emb = params["params"]["inputs"]["embedding"]

    t = 3
    reads = {"future": range(0, t), "past": range(t + 1, n), "forward": range(0, t + 1),
             "backward": range(t, n), "primary": range(0, n)}

    def at_t(table):
        p = jax.tree.map(lambda v: v, params)
        p["params"]["inputs"]["embedding"] = table
        out = model.apply(p, {"ids": ids, "mask": mask})
        return jnp.stack([jnp.sum(out[name][0, t]) for name in reads])

    jac = np.abs(np.asarray(jax.jacrev(at_t)(emb))).sum(axis=2)  # [module, vocab row]
    for g, (name, seen) in zip(jac, reads.items()):
        for pos in range(T):
            if pos in seen:
                assert g[ids[0, pos]] > 0, (name, pos, g)
            else:
                assert g[ids[0, pos]] == 0.0, (name, pos, g)


def test_cvt_losses_and_20_alternating_sgd_steps_match_a_pytorch_reference(conll, tmp_path, shared_data):
    """Dropout off, the same parameters and batches: the primary cross-entropy on a labelled minibatch and the CVT
    loss (sum over the 4 auxiliary modules of KL to the held primary predictions) on an unlabelled one agree
    within 1e-5; then 20 steps of plain SGD (lr 0.5) through the loop's own train step, labelled and unlabelled in
    turn, give the reference's loss at every step within 1e-4."""
    import optax
    import torch

    from ptm_jax.jobs.cvt.job import build_cvt
    from ptm_jax.train.state import TrainState
    from ptm_jax.train.step import make_train_step

    cfg = load_config(None, [f"output_dir={tmp_path / 'run'}", "finetune.job=cvt", "finetune.task=conll2003",
                             f"finetune.data_dir={conll}", "finetune.init=random:6", "finetune.max_seq_length=40",
                             "finetune.classifier_dropout=0.0", f"cvt.unlabelled={_text(tmp_path, shared_data)}",
                             "cvt.unlabelled_sentences=64", "cvt.hidden_1=5", "cvt.hidden_2=4",
                             "cvt.projection=7"])
    obj, _, _ = build_cvt(cfg)
    params = nn.meta.unbox(obj.init(jax.random.key(1), obj.example_batch(4)))
    B = 4
    stream = obj.train_batches(0, B, 0, 1)
    batches = [next(stream) for _ in range(20)]
    assert [float(b["unlabelled"][0]) for b in batches[:4]] == [0.0, 1.0, 0.0, 1.0]

    def rows(batch):
        n = batch["mask"].sum(1)
        if batch["unlabelled"][0] > 0:
            return [batch["ids"][r, :n[r]].tolist() for r in range(B)]
        return [(batch["ids"][r, :n[r]].tolist(), batch["labels"][r, :n[r]].tolist()) for r in range(B)]

    from cvt_reference import torch_reference

    supervised, cvt, trained = torch_reference(params, 5)

    def jax_loss(p, batch):
        b = {k: jnp.asarray(v) for k, v in batch.items()}
        return float(obj.loss(p, b, jax.random.key(0), obj.normalizers(b), train=True)[0])

    lab, unl = batches[0], batches[1]
    with torch.no_grad():
        ref_sup, ref_cvt = float(supervised(rows(lab))), float(cvt(rows(unl)))
    assert jax_loss(params, lab) == pytest.approx(ref_sup, abs=1e-5)
    assert jax_loss(params, unl) == pytest.approx(ref_cvt, abs=1e-5) and ref_cvt > 0.01

    lr = 0.5
    tx = optax.sgd(lr)
    step = jax.jit(make_train_step(obj, tx, lambda s: lr))
    state = TrainState.create(params, tx)
    opt = torch.optim.SGD(trained, lr=lr)
    ours, theirs = [], []
    for batch in batches:
        state, metrics = step(state, {k: jnp.asarray(v) for k, v in batch.items()}, jax.random.key(0))
        num, den = metrics["loss"]
        ours.append(float(num) / float(den))
        opt.zero_grad()
        ref = cvt(rows(batch)) if batch["unlabelled"][0] > 0 else supervised(rows(batch))
        ref.backward()
        opt.step()
        theirs.append(float(ref.detach()))
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
    assert ours[-2] < 0.5 * ours[0]  # the supervised loss fell


# ---------------------------------------------------------------------------------------------- the job


def _args(conll, text, out, *more):
    return ["finetune.job=cvt", "finetune.task=conll2003", f"finetune.data_dir={conll}", "finetune.init=random:8",
            "finetune.batch_size=8", "finetune.max_seq_length=32", "finetune.epochs=2", "finetune.learning_rate=0.01",
            f"cvt.unlabelled={text}", "cvt.unlabelled_sentences=48", "cvt.hidden_1=8", "cvt.hidden_2=8",
            "cvt.projection=8", "train.progress_bar=false", f"output_dir={out}", *more]


def test_cvt_job_runs_through_ptm_finetune_and_ptm_eval_scores_its_kept_model_as_recorded(conll, tmp_path,
                                                                                          shared_data, capsys):
    """24 labelled sentences, batch 8, 2 epochs: 12 steps alternating labelled and unlabelled (metrics.jsonl), the
    best eng.testa F1 kept; `ptm eval` of the kept model gives best.json's F1, and on eng.testb a finite F1. The
    baseline (cvt.enabled=false) is the same network (the same parameter shapes) trained on the 6 labelled
    steps alone."""
    from ptm_jax.cli import main

    text = _text(tmp_path, shared_data)
    out = tmp_path / "cvt"
    assert main(["finetune", *_args(conll, text, out)]) == 0
    stage = out / "finetune-cvt"
    summary = json.loads((stage / "summary.json").read_text())
    assert summary["step"] == summary["steps"] == 12 and summary["labelled_steps"] == 6
    assert summary["cvt"]["active"] and summary["cvt"]["unlabelled_sentences_read"] == 48
    train = [json.loads(ln) for ln in (stage / "metrics.jsonl").read_text().splitlines()]
    flags = {r["step"]: r["unlabelled"] for r in train if "unlabelled" in r}
    assert all(v == float(s % 2 == 0) for s, v in flags.items()), flags  # step k+1 ran batch k
    assert set(flags.values()) == {0.0, 1.0}, flags  # log_every 6 taken as 5: the records alternate
    best = json.loads((stage / "best.json").read_text())
    capsys.readouterr()
    assert main(["eval", "--model", str(stage / "best"), "finetune.batch_size=8"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["metrics"]["f1"] == pytest.approx(best["metrics"]["f1"], abs=1e-6)
    assert again["metrics"]["loss"] == pytest.approx(best["metrics"]["loss"], abs=1e-5)
    assert main(["eval", "--model", str(stage / "best"), "--split", "test", "finetune.batch_size=8"]) == 0
    test = json.loads(capsys.readouterr().out)
    assert test["split"] == "test" and 0.0 <= test["metrics"]["f1"] <= 1.0 and len(
        (stage / "best" / "predictions-test" / "conll2003-test.txt").read_text().split("\n\n")) >= 12

    base = tmp_path / "base"
    assert main(["finetune", *_args(conll, text, base, "cvt.enabled=false")]) == 0
    b = json.loads((base / "finetune-cvt" / "summary.json").read_text())
    assert b["step"] == b["steps"] == 6 and not b["cvt"]["active"]
    import orbax.checkpoint as ocp

    shapes = [jax.tree.map(np.shape, ocp.PyTreeCheckpointer().restore(str(d / "finetune-cvt" / "best" / "params")))
              for d in (out, base)]
    assert shapes[0] == shapes[1]
    assert json.loads((base / "finetune-cvt" / "best" / "cvt_model.json").read_text())["words"] == \
        json.loads((stage / "best" / "cvt_model.json").read_text())["words"]


def test_the_alternating_stream_resumes_at_any_step(conll, tmp_path, shared_data):
    """train_batches from global step k gives the batches the stream from step 0 gives at k, k + 1, ...: labelled
    at even steps, unlabelled at odd ones."""
    from ptm_jax.jobs.cvt.job import build_cvt

    cfg = load_config(None, _args(conll, _text(tmp_path, shared_data), tmp_path / "r"))
    obj, _, _ = build_cvt(cfg)
    s = obj.train_batches(0, 8, 0, 1)
    full = [next(s) for _ in range(9)]
    assert [float(b["unlabelled"].max()) for b in full] == [0, 1, 0, 1, 0, 1, 0, 1, 0]
    for k in (1, 4, 7):
        s = obj.train_batches(k * 8, 8, 0, 1)
        for j in range(k, 9):
            got = next(s)
            assert all(np.array_equal(got[key], full[j][key]) for key in full[j]), (k, j)


def test_bad_input_is_refused_with_one_line_naming_the_field(conll, tmp_path, shared_data, capsys):
    """A missing or empty unlabelled corpus (cvt.unlabelled), none at all with CVT on, a labelled set with no
    sentence or no entity tag (finetune.data_dir), a CRF output layer (tagging.head): exit 2, one error line naming
    the field, no traceback, nothing trained."""
    from ptm_jax.cli import main

    text = _text(tmp_path, shared_data)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    untagged = tmp_path / "untagged"
    untagged.mkdir()
    for name in ("eng.train", "eng.testa", "eng.testb"):
        lines = (conll / name).read_text().splitlines()
        (untagged / name).write_text("\n".join(" ".join(ln.split()[:-1] + ["O"]) if ln.split() and
                                               not ln.startswith("-DOCSTART-") else ln for ln in lines) + "\n")
    blank = tmp_path / "blank"
    blank.mkdir()
    (blank / "eng.train").write_text("-DOCSTART- -X- -X- O\n\n")
    for name in ("eng.testa", "eng.testb"):
        (blank / name).write_text((conll / name).read_text())
    cases = [
        ([f"cvt.unlabelled={tmp_path / 'nowhere.txt'}"], "does not exist", "cvt.unlabelled="),
        ([f"cvt.unlabelled={empty}"], "is empty", "cvt.unlabelled="),
        (["cvt.unlabelled="], "cvt.unlabelled is empty", "cvt.unlabelled"),
        ([f"finetune.data_dir={untagged}"], "have no entity tags", "finetune.data_dir="),
        ([f"finetune.data_dir={blank}"], "no labelled training sentences", "finetune.data_dir="),
        (["tagging.head=crf"], "by its own softmax", "tagging.head="),
    ]
    for i, (more, said, field) in enumerate(cases):
        out = tmp_path / f"bad{i}"
        capsys.readouterr()
        assert main(["finetune", *_args(conll, text, out, *more)]) == 2, more
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.startswith("ptm finetune: error:")]
        assert len(lines) == 1 and said in lines[0] and field in lines[0] and "Traceback" not in err, \
            (more, err[-1500:])
        assert not list(out.glob("**/summary.json"))
