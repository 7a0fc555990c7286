"""ELMo (ptm_jax/families/elmo): bilm-tf's character ids; the import of an options.json + weights.hdf5 in the
bilm-tf layout (written here from known random weights) puts each tensor where it belongs; the imported
model's per-layer word features equal an independent PyTorch re-implementation written here from bilm-tf's
rules (TF gate order, forget bias, clipping, residual) and AllenNLP 2.10's ``_ElmoBiLm`` (from the folder the
README's test command installs it in, tests/reference_libs.py); bad input gets clear errors; the residual adds the
dropped input; the scalar mix; the log-uniform sampler; the data lanes carry both directions across batches; the
tiny preset trains through the loop with state carried across steps."""
from __future__ import annotations

import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference_libs
from bilm_reference import load_allennlp_elmo

from ptm_jax.errors import CheckpointError, ConfigError, DataError
from ptm_jax.families.elmo import chars as ch
from ptm_jax.families.elmo.weights import config_from_options, load_bilm

h5py = pytest.importorskip("h5py")
torch = pytest.importorskip("torch")

OPTIONS = {"lstm": {"use_skip_connections": True, "projection_dim": 6, "cell_clip": 3, "proj_clip": 3,
                    "dim": 10, "n_layers": 2},
           "char_cnn": {"activation": "relu", "filters": [[1, 4], [2, 4], [3, 8]], "n_highway": 2,
                        "embedding": {"dim": 4}, "n_characters": 262, "max_characters_per_token": 50}}
SENTENCES = [["The", "play", "was", "naïve", "."], ["They", "play", "x" * 60], ["ok"]]


def write_bilm(directory, options=OPTIONS, drop=None, reshape=None, scale=0.6):
    """options.json + weights.hdf5 in bilm-tf's layout with seeded random weights; ``drop`` leaves a dataset
    out, ``reshape`` gives one a wrong shape."""
    rng = np.random.default_rng(0)
    o = options
    E, P, H = o["char_cnn"]["embedding"]["dim"], o["lstm"]["projection_dim"], o["lstm"]["dim"]
    F = sum(n for _, n in o["char_cnn"]["filters"])
    data = {"char_embed": (261, E)}
    for i, (w, n) in enumerate(o["char_cnn"]["filters"]):
        data[f"CNN/W_cnn_{i}"], data[f"CNN/b_cnn_{i}"] = (1, w, E, n), (n,)
    for k in range(o["char_cnn"]["n_highway"]):
        for a, s in (("W_carry", (F, F)), ("b_carry", (F,)), ("W_transform", (F, F)), ("b_transform", (F,))):
            data[f"CNN_high_{k}/{a}"] = s
    data["CNN_proj/W_proj"], data["CNN_proj/b_proj"] = (F, P), (P,)
    for d in range(2):
        for layer in range(o["lstm"]["n_layers"]):
            cell = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            data[f"{cell}/W_0"], data[f"{cell}/B"], data[f"{cell}/W_P_0"] = (2 * P, 4 * H), (4 * H,), (H, P)
    arrays = {}
    with h5py.File(directory / "weights.hdf5", "w") as f:
        for name, shape in data.items():
            if name == drop:
                continue
            if name == reshape:
                shape = shape[:-1] + (shape[-1] + 1,)
            gain = 3.0 if name.endswith(("W_0", "W_P_0")) else 1.0    # large enough that both clips bite
            arrays[name] = (rng.normal(0, scale * gain, shape)).astype(np.float32)
            f.create_dataset(name, data=arrays[name])
    (directory / "options.json").write_text(json.dumps(options))
    return directory / "options.json", directory / "weights.hdf5", arrays


@pytest.fixture(scope="module")
def bilm(tmp_path_factory):
    d = tmp_path_factory.mktemp("bilm")
    opts, weights, arrays = write_bilm(d)
    tree, cfg = load_bilm(opts, weights)
    from ptm_jax.families.elmo.features import word_features

    return types.SimpleNamespace(options=opts, weights=weights, arrays=arrays, tree=tree, cfg=cfg,
                                 features=word_features(tree, cfg, None, SENTENCES, batch_size=2))


def test_character_ids_are_bilm_tfs():
    """bow 258, bytes, eow 259, pad 260, all + 1 (0 = mask); 48 bytes at most; <S>/</S> = [bow, 256|257, eow]."""
    assert ch.word_char_ids("ab")[:5].tolist() == [259, 98, 99, 260, 261]
    assert ch.word_char_ids("é")[:4].tolist() == [259, 0xC3 + 1, 0xA9 + 1, 260]
    long = ch.word_char_ids("y" * 60)
    assert long.shape == (50,) and long[1:49].tolist() == [ord("y") + 1] * 48 and long[49] == 260
    assert ch.sentence_char_ids(["a"])[[0, 2], :4].tolist() == [[259, 257, 260, 261], [259, 258, 260, 261]]
    with pytest.raises(DataError, match="not UTF-8"):
        ch.word_char_ids(b"caf\xe9", where="line 3")
    with pytest.raises(DataError, match="sentence 2 is empty"):
        ch.sentence_char_ids([], where="sentence 2")


def test_sentence_file_errors_name_the_line(tmp_path):
    p = tmp_path / "s.txt"
    p.write_bytes(b"a b\n\nc\n")
    with pytest.raises(DataError, match=r"s.txt:2: empty line"):
        ch.read_sentences(p)
    p.write_bytes(b"a b\nc \xff d\n")
    with pytest.raises(DataError, match=r"s.txt:2: byte 2"):
        ch.read_sentences(p)
    p.write_bytes("a B\nnaïve c\n".encode())
    assert ch.read_sentences(p, lower_case=True) == [["a", "b"], ["naïve", "c"]]


def test_import_puts_each_hdf5_tensor_where_it_belongs(bilm):
    a, t, H = bilm.arrays, bilm.tree["elmo"], 10
    enc = t["char_encoder"]
    assert np.all(enc["char_embed"][0] == 0) and np.array_equal(enc["char_embed"][1:], a["char_embed"])
    assert np.array_equal(enc["cnn_2_kernel"], a["CNN/W_cnn_2"][0])
    assert np.array_equal(enc["highway_1"]["carry"]["kernel"], a["CNN_high_1/W_carry"])
    assert np.array_equal(enc["projection"]["bias"], a["CNN_proj/b_proj"])
    w0 = a["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_0"]
    b = a["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B"]
    back = t["bilm"]["backward_1"]
    # TF blocks (i, j, f, o) -> ours (i, f, j, o); TF's forget_bias 1.0 folded into f
    assert np.array_equal(back["kernel"][:, H:2 * H], w0[:6, 2 * H:3 * H])
    assert np.array_equal(back["recurrent_kernel"][:, 2 * H:3 * H], w0[6:, H:2 * H])
    np.testing.assert_allclose(back["bias"][H:2 * H], b[2 * H:3 * H] + 1.0)
    assert np.array_equal(back["bias"][3 * H:], b[3 * H:])
    assert bilm.cfg.n_layers == 2 and bilm.cfg.filters == [[1, 4], [2, 4], [3, 8]] and bilm.cfg.cell_clip == 3


def torch_bilm_layers(arrays, options, char_ids: np.ndarray) -> list[np.ndarray]:
    """An independent re-implementation from bilm-tf's rules, straight from the hdf5 arrays: char-CNN (max over
    positions, then relu), highway (g * relu(W_t x) + (1 - g) x with g = sigmoid(W_carry x)), projection, then
    per direction LSTMP cells in TF's gate order (i, j, f, o) with forget_bias 1, cell clip after the update,
    projection clip after the projection, residual around layer 2; the backward direction reads the reversed
    row. One sentence (with <S>, </S>) at a time -> [3, T, 2P]."""
    T = lambda x: torch.from_numpy(np.asarray(x, np.float64))
    o = options
    emb = torch.cat([torch.zeros(1, o["char_cnn"]["embedding"]["dim"], dtype=torch.float64), T(arrays["char_embed"])])
    x = emb[torch.from_numpy(char_ids.astype(np.int64))]                       # [T, 50, E]
    pooled = []
    for i, _ in enumerate(o["char_cnn"]["filters"]):
        w = T(arrays[f"CNN/W_cnn_{i}"][0]).permute(2, 1, 0)                     # [n, E, w]
        conv = torch.nn.functional.conv1d(x.transpose(1, 2), w) + T(arrays[f"CNN/b_cnn_{i}"])[None, :, None]
        pooled.append(torch.relu(conv.max(dim=-1).values))
    h = torch.cat(pooled, -1)
    for k in range(o["char_cnn"]["n_highway"]):
        g = torch.sigmoid(h @ T(arrays[f"CNN_high_{k}/W_carry"]) + T(arrays[f"CNN_high_{k}/b_carry"]))
        h = g * torch.relu(h @ T(arrays[f"CNN_high_{k}/W_transform"]) + T(arrays[f"CNN_high_{k}/b_transform"])) \
            + (1 - g) * h
    tok = h @ T(arrays["CNN_proj/W_proj"]) + T(arrays["CNN_proj/b_proj"])
    P, Hd, clip = o["lstm"]["projection_dim"], o["lstm"]["dim"], 3.0
    layers = [torch.cat([tok, tok], -1)]
    outs = {}
    for d in range(2):
        inp = tok if d == 0 else tok.flip(0)
        outs[d] = []
        for layer in range(2):
            cell = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            W, B, WP = T(arrays[f"{cell}/W_0"]), T(arrays[f"{cell}/B"]), T(arrays[f"{cell}/W_P_0"])
            c, m, ys = torch.zeros(Hd, dtype=torch.float64), torch.zeros(P, dtype=torch.float64), []
            for t in range(inp.shape[0]):
                i, j, f, og = (torch.cat([inp[t], m]) @ W + B).split(Hd)
                c = torch.clamp(torch.sigmoid(f + 1.0) * c + torch.sigmoid(i) * torch.tanh(j), -clip, clip)
                m = torch.clamp((torch.sigmoid(og) * torch.tanh(c)) @ WP, -clip, clip)
                ys.append(m)
            y = torch.stack(ys) + (inp if layer > 0 else 0)
            outs[d].append(y if d == 0 else y.flip(0))
            inp = y
    layers += [torch.cat([outs[0][k], outs[1][k]], -1) for k in range(2)]
    return np.stack([t.numpy() for t in layers])


def test_features_equal_an_independent_torch_reimplementation(bilm):
    for s, feats in zip(SENTENCES, bilm.features):
        ref = torch_bilm_layers(bilm.arrays, OPTIONS, ch.sentence_char_ids(s))[:, 1:-1]
        assert feats.shape == (3, len(s), 12)
        np.testing.assert_allclose(feats, ref, rtol=1e-5, atol=1e-5)
    first = np.concatenate([f[1] for f in bilm.features])
    assert np.abs(first).max() == pytest.approx(3.0)   # the projection clip (3) bites on the first LSTM layer


def test_features_equal_allennlp_elmo_bilm(bilm):
    """AllenNLP's ``_ElmoBiLm`` (its own character mapper, weight loader and LSTM) on the same files."""
    loaded = load_allennlp_elmo()
    if loaded is None:
        pytest.skip(reference_libs.missing("allennlp"))
    elmo, mapper = loaded[0], loaded[1]()
    model = elmo._ElmoBiLm(str(bilm.options), str(bilm.weights)).eval()
    n = max(map(len, SENTENCES))
    ids = np.zeros((len(SENTENCES), n, 50), np.int64)
    for b, s in enumerate(SENTENCES):
        for t, w in enumerate(s):
            ids[b, t] = mapper.convert_word_to_char_ids(w)
            assert ids[b, t].tolist() == ch.word_char_ids(w).tolist()
    with torch.no_grad():
        out = model(torch.from_numpy(ids))
    acts = np.stack([a.double().numpy() for a in out["activations"]])     # [3, B, n + 2, 2P]
    for b, s in enumerate(SENTENCES):
        np.testing.assert_allclose(bilm.features[b], acts[:, b, 1:len(s) + 1], rtol=1e-5, atol=1e-5)


def test_wrong_hdf5_layout_and_mismatched_options_are_clear_errors(tmp_path):
    opts, weights, _ = write_bilm(tmp_path, drop="CNN_high_1/W_transform")
    with pytest.raises(CheckpointError, match=r"weights.hdf5: missing dataset 'CNN_high_1/W_transform'"):
        load_bilm(opts, weights)
    opts, weights, _ = write_bilm(tmp_path, reshape="RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0")
    with pytest.raises(CheckpointError, match=r"'RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0' has shape \[10, 7\] "
                                              r"where the options file implies \[10, 6\]"):
        load_bilm(opts, weights)
    bigger = json.loads(json.dumps(OPTIONS))
    bigger["lstm"]["dim"] = 12
    (tmp_path / "big.json").write_text(json.dumps(bigger))
    opts, weights, _ = write_bilm(tmp_path)
    with pytest.raises(CheckpointError, match="options.json and weights.hdf5 disagree"):
        load_bilm(tmp_path / "big.json", weights)
    del bigger["lstm"]["projection_dim"]
    (tmp_path / "big.json").write_text(json.dumps(bigger))
    with pytest.raises(ConfigError, match=r"big.json: missing field lstm.projection_dim"):
        config_from_options(tmp_path / "big.json")
    (tmp_path / "w.hdf5").write_text("not hdf5")
    with pytest.raises(CheckpointError, match="w.hdf5: not an HDF5 file"):
        load_bilm(opts, tmp_path / "w.hdf5")


def test_float64_dtype_needs_jax_64_bit_mode_and_then_keeps_every_parameter_and_state_float64():
    """``model.dtype='float64'`` (for parity runs against a float64 reference) is refused in one line naming the
    field without JAX's 64-bit mode; in it, the parameters, the carried LSTM state and the loss are float64."""
    from ptm_jax.config_loading import load_config
    from ptm_jax.families.elmo.model import ElmoLanguageModel, init_carry

    with pytest.raises(ConfigError, match=r"model.dtype='float64' needs JAX's 64-bit mode: set JAX_ENABLE_X64=1"):
        load_config("elmo_tiny", ["model.dtype=float64"])
    with jax.enable_x64(True):
        cfg = load_config("elmo_tiny", ["model.dtype=float64"]).model
        chars = {d: jnp.ones((2, 3, cfg.max_characters_per_token), jnp.int32) for d in ("forward", "backward")}
        mask = {d: jnp.ones((2, 3), bool) for d in ("forward", "backward")}
        model = ElmoLanguageModel(cfg)
        params = model.init(jax.random.key(0), chars, mask, init_carry(cfg, 2))
        top, (w, b), carry = model.apply(params, chars, mask, init_carry(cfg, 2))
        assert {str(a.dtype) for a in jax.tree.leaves((params, top, w, b, carry))} == {"float64"}
        from ptm_jax.families.elmo.softmax import full_softmax_logits
        from ptm_jax.objectives.language_model import lm_terms

        terms = lm_terms(full_softmax_logits(top["forward"], w, b), jnp.zeros((2, 3), jnp.int32), jnp.ones((2, 3)))
        assert terms["lm_loss"][0].dtype == jnp.float64


def test_ptm_import_bilm_tf_then_embed_layers_and_scalar_mix_export_the_features(bilm, tmp_path, capsys):
    """`ptm import bilm-tf options.json weights.hdf5` writes a params directory whose `ptm embed --layers` features
    (hdf5 in AllenNLP's layout, npz) equal the imported model's; `--mix` is gamma * softmax(w) . layers; bad input
    (an empty line, a missing layer, an unknown format, a wrong hdf5) is one error line and exit status 2."""
    from ptm_jax import cli

    out = tmp_path / "elmo"
    assert cli.main(["import", "bilm-tf", str(bilm.options), str(bilm.weights), "--out", str(out)]) == 0
    text = tmp_path / "sentences.txt"
    text.write_text("".join(" ".join(s) + "\n" for s in SENTENCES))
    assert cli.main(["embed", str(out), str(text), "--layers", "all", "--out", str(tmp_path / "f.hdf5")]) == 0
    with h5py.File(tmp_path / "f.hdf5") as f:
        assert json.loads(f["sentence_to_index"][0])[" ".join(SENTENCES[1])] == 1
        for i in range(len(SENTENCES)):
            np.testing.assert_allclose(f[str(i)][...], bilm.features[i], rtol=1e-5, atol=1e-6)
    assert cli.main(["embed", str(out), str(text), "--layers", "1,-1", "--mix", "0,1", "--gamma", "2",
                     "--out", str(tmp_path / "m.npz")]) == 0
    s = np.exp([0.0, 1.0]) / np.exp([0.0, 1.0]).sum()
    with np.load(tmp_path / "m.npz") as z:
        for i in range(len(SENTENCES)):
            np.testing.assert_allclose(z[str(i)], 2 * (s[0] * bilm.features[i][1] + s[1] * bilm.features[i][2]),
                                       rtol=1e-5, atol=1e-6)
    capsys.readouterr()
    text.write_text("The play\n\nok\n")
    assert cli.main(["embed", str(out), str(text), "--layers", "top"]) == 2
    assert "sentences.txt:2: empty line" in capsys.readouterr().err
    text.write_text("The play\n")
    assert cli.main(["embed", str(out), str(text), "--layers", "3"]) == 2
    assert "layer 3 does not exist; this model has 3 feature layers" in capsys.readouterr().err
    assert cli.main(["import", "bilm", str(bilm.options), str(bilm.weights), "--out", str(tmp_path / "x")]) == 2
    assert "unknown format; known: bilm-tf" in capsys.readouterr().err
    (tmp_path / "bad.hdf5").write_text("not hdf5")
    assert cli.main(["import", "bilm-tf", str(bilm.options), str(tmp_path / "bad.hdf5"), "--out",
                     str(tmp_path / "x")]) == 2
    assert "bad.hdf5: not an HDF5 file" in capsys.readouterr().err


def test_residual_adds_the_dropped_input_as_bilm_tfs_dropout_wrapper_does():
    """bilm-tf wraps each residual LSTM cell in DropoutWrapper(input_keep_prob): the cell adds the input it was
    given, the dropped one. With layer 2's weights at zero (its LSTMP outputs 0) its output is that input alone:
    zero where dropout dropped layer 1's output, twice it (keep 0.5) elsewhere."""
    import flax.linen as nn

    from ptm_jax.families.elmo.config import ElmoConfig
    from ptm_jax.families.elmo.model import DIRECTIONS, BiLM

    cfg = ElmoConfig(vocab_size=10, filters=[[1, 2]], n_highway=0, projection_dim=4, lstm_dim=6, n_layers=2,
                     dropout=0.5)
    x = {d: jax.random.normal(jax.random.key(i), (2, 5, 4)) for i, d in enumerate(DIRECTIONS)}
    mask = {d: jnp.ones((2, 5), bool) for d in DIRECTIONS}
    params = nn.meta.unbox(BiLM(cfg).init(jax.random.key(0), x, mask, None, False))
    for d in DIRECTIONS:
        params["params"][f"{d}_1"] = jax.tree.map(jnp.zeros_like, params["params"][f"{d}_1"])
    outs, _ = BiLM(cfg).apply(params, x, mask, None, True, rngs={"dropout": jax.random.key(3)})
    for d in DIRECTIONS:
        first, second = np.asarray(outs[d][0]), np.asarray(outs[d][1])
        dropped = second == 0
        assert 0.2 < dropped.mean() < 0.8 and not np.any(first == 0)
        np.testing.assert_allclose(second[~dropped], 2 * first[~dropped], rtol=1e-6)


def test_scalar_mix_is_gamma_times_softmax_weighted_sum_with_masked_layer_norm():
    from ptm_jax.models.scalar_mix import ScalarMix

    rng = np.random.default_rng(0)
    layers = rng.normal(2.0, 3.0, (3, 2, 4, 5)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)
    mix = ScalarMix(3, layer_norm=True)
    params = {"params": {"weights": jnp.array([0.5, -1.0, 2.0]), "gamma": jnp.array([1.5])}}
    out = np.asarray(mix.apply(params, jnp.asarray(layers), jnp.asarray(mask)))
    s = np.exp([0.5, -1.0, 2.0]) / np.exp([0.5, -1.0, 2.0]).sum()
    ref = 0.0
    for j in range(3):
        real = layers[j][mask]
        ref = ref + s[j] * (layers[j] - real.mean()) / np.sqrt(real.var() + 1e-12)
    np.testing.assert_allclose(out, 1.5 * ref, rtol=1e-5, atol=1e-5)
    init = mix.init(jax.random.PRNGKey(0), jnp.asarray(layers))
    plain = ScalarMix(3).apply(init, jnp.asarray(layers))   # w = 0, gamma = 1: the mean of the layers
    np.testing.assert_allclose(np.asarray(plain), layers.mean(0), rtol=1e-5, atol=1e-5)


def test_log_uniform_sampler_frequencies_and_sampled_softmax_with_accidental_hits_removed():
    from ptm_jax.families.elmo.softmax import (
        log_uniform_log_q,
        log_uniform_sample,
        sampled_softmax_ce,
    )

    V, K = 50, 20
    draws = np.asarray(log_uniform_sample(jax.random.PRNGKey(0), 20_000, V))
    q = np.exp(np.asarray(log_uniform_log_q(jnp.arange(V), V), np.float64))
    assert q.sum() == pytest.approx(1.0, abs=1e-5) and q[0] == pytest.approx(np.log(2) / np.log(51), rel=1e-5)
    np.testing.assert_allclose(np.bincount(draws, minlength=V)[:3] / draws.size, q[:3], rtol=0.05)
    rng = np.random.default_rng(0)
    w, b, h = rng.normal(size=(V, 3)), rng.normal(size=V), rng.normal(size=(4, 3))
    targets = np.array([0, 1, 7, 49])
    key = jax.random.PRNGKey(3)
    ce = np.asarray(jax.jit(sampled_softmax_ce, static_argnums=5)(jnp.asarray(h, jnp.float32), jnp.asarray(targets), jnp.asarray(w, jnp.float32),
                                       jnp.asarray(b, jnp.float32), key, K))
    sampled = np.asarray(log_uniform_sample(key, K, V))
    assert 0 in sampled and 1 in sampled          # the frequent targets are drawn: their hits must go
    for r, y in enumerate(targets):
        true = h[r] @ w[y] + b[y] - np.log(K * q[y])
        neg = [h[r] @ w[s] + b[s] - np.log(K * q[s]) for s in sampled if s != y]
        logits = np.array([true] + neg)
        assert ce[r] == pytest.approx(np.log(np.exp(logits - logits.max()).sum()) + logits.max() - true, rel=1e-4)


def test_lanes_continue_across_batches_in_both_directions_and_eval_predicts_each_position_once():
    from ptm_jax.data.pretraining.causal_lm import PackedStream
    from ptm_jax.data.pretraining.source import ArraySource
    from ptm_jax.families.elmo.data import lane_rows, reversed_span

    lengths = [7, 3, 9, 4, 6]
    start = np.cumsum([0] + lengths) + 10
    docs = [[np.arange(a, a + n, dtype=np.int32)] for a, n in zip(start, lengths)]   # every token unique
    stream = PackedStream(ArraySource(docs), 2, seed=0, shuffle=False)
    N, G, L = stream.pass_tokens, 4, 3                                                # N = 34 with the eos
    two = stream.span(0, 2 * N)[0]
    np.testing.assert_array_equal(reversed_span(stream, 30, 40), np.concatenate([two[:N][::-1], two[N:][::-1]])[30:40])
    b0, b1 = (lane_rows(stream, i, range(G), G, L, 0, finite=False) for i in (0, 1))
    for d in ("fwd_ids", "bwd_ids"):
        np.testing.assert_array_equal(b1[d][:, 0], b0[d][:, -1])   # each lane goes on where it stopped
    np.testing.assert_array_equal(b0["fwd_ids"][2], two[2 * (N // G): 2 * (N // G) + L + 1])
    counts = {"fwd": np.zeros(N, int), "bwd": np.zeros(N, int)}
    stride = -(-N // G)
    for i in range(-(-stride // L)):
        rows = lane_rows(stream, i, range(G), G, L, 0, finite=True)
        for r in range(G):
            pos = r * stride + i * L + 1 + np.arange(L)
            for name, w in (("fwd", rows["target_weights"][r]), ("bwd", rows["bwd_weights"][r])):
                np.add.at(counts[name], pos[w > 0], 1)
    for c in counts.values():
        assert c[0] == 0 and np.all(c[1:] == 1)
