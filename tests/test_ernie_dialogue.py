"""ERNIE's dialogue LM (ptm_jax/families/ernie/dialogue*.py): the dialogue readers (roles,
turns, the missing-role errors naming file and line), the tokenized dialogues, the examples (turns, roles, the
fake-response rate and where fakes come from, masking never on [CLS]/[SEP]) and the role embedding's effect on
the network's output. Training through the loop (finite losses, exact resume, 1 device = (2,2,2)) is
tests/test_conformance.py's ernie_dlm row.

Real text: tiny-shakespeare (../shared/data/corpus/tinyshakespeare/input.txt), whose speakers alternate."""
import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ptm_jax.config_loading import load_config
from ptm_jax.errors import DataError
from ptm_jax.families import registry
from ptm_jax.families.ernie import dialogue as D
from ptm_jax.families.ernie.dialogue_data import example
from ptm_jax.families.ernie.model import ErnieForPreTraining
from ptm_jax.train.stages import prepare_corpus

TURNS = """# two dialogues
Alice: Where is the key?
Bob: Under the mat.
Alice: Thanks.

Carol: Who wrote this?
Dan: Not me.
Erin: Nor I.
"""
L = 64


@pytest.fixture(scope="module")
def shakespeare(shared_data):
    return str(shared_data / "corpus/tinyshakespeare/input.txt")


def test_turns_file_gives_turns_and_query_response_roles(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text(TURNS, encoding="utf-8")
    dialogues = D.read_turns(str(path))
    assert [[(t.speaker, t.text, t.line) for t in d] for d in dialogues] == [
        [("Alice", "Where is the key?", 2), ("Bob", "Under the mat.", 3), ("Alice", "Thanks.", 4)],
        [("Carol", "Who wrote this?", 6), ("Dan", "Not me.", 7), ("Erin", "Nor I.", 8)]]
    assert [D.roles(d) for d in dialogues] == [[0, 1, 0], [0, 1, 1]]   # Q R Q and Q R R


def test_a_turn_without_a_speaker_is_an_error_naming_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text(TURNS.replace("Dan: Not me.", "Not me, said nobody"), encoding="utf-8")
    with pytest.raises(DataError, match=rf"dialogue file {path}, line 7: no speaker role"):
        D.read_turns(str(path))
    script = tmp_path / "bad_script.txt"
    script.write_text("ROMEO:\nO, she doth teach the torches.\n\nand burn bright\n", encoding="utf-8")
    with pytest.raises(DataError, match=rf"dialogue file {script}, line 4: a speech must start with a 'Speaker:'"):
        D.read_script(str(script), 4)


def test_tinyshakespeare_script_becomes_alternating_dialogues(shakespeare, tmp_path):
    dialogues = D.read_script(shakespeare, 6)
    # counted independently: speeches = blank-line blocks whose first line is "Name:" and that have text
    text = Path(shakespeare).read_text(encoding="utf-8")
    blocks = [b.split("\n") for b in text.split("\n\n") if b.strip()]
    speeches = [b for b in blocks if len([s for s in b[1:] if s.strip()])]
    assert sum(map(len, dialogues)) == len(speeches)
    first = dialogues[0]
    assert [t.speaker for t in first] == ["First Citizen", "All"] * 3
    assert [t.text for t in first[:2]] == ["Before we proceed any further, hear me speak.", "Speak, speak."]
    assert D.roles(first) == [0, 1] * 3
    assert all(len(d) == 6 for d in dialogues[:-1]) and 2 <= len(dialogues[-1]) <= 6
    out = tmp_path / "turns.txt"
    assert D.script_to_turns(shakespeare, out, 6) == len(dialogues)
    assert [[(t.speaker, t.text) for t in d] for d in D.read_turns(str(out))] == \
        [[(t.speaker, t.text) for t in d] for d in dialogues]


@pytest.fixture(scope="module")
def dlm(shared_data, tmp_path_factory):
    d = tmp_path_factory.mktemp("dlm")
    text = (shared_data / "corpus/tinyshakespeare/input.txt").read_text(encoding="utf-8").splitlines()[:3000]
    (d / "corpus.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    cfg = load_config("ernie_tiny", ["objective=ernie_dlm", f"data.corpus={d / 'corpus.txt'}", "data.format=lines",
                                     f"output_dir={d}", "tokenizer.vocab_size=500", "model.vocab_size=500",
                                     f"data.max_seq_length={L}", "train.batch_size=8"])
    corpus = prepare_corpus(cfg)
    return cfg, corpus, registry.get("ernie").pretraining.objectives["ernie_dlm"](cfg, corpus)


def test_tokenized_dialogues_keep_turns_roles_and_hold_out_the_last(dlm):
    cfg, corpus, obj = dlm
    src = corpus.artifacts["dialogues"]
    dialogues = D.read_script(cfg.data.corpus, cfg.data.dialogue_turns)
    assert src.num_dialogues == len(dialogues)   # every speech of these lines tokenizes to >= 1 token
    tok = corpus.tokenizer
    for d in (0, 7, src.num_dialogues - 1):
        turns = range(int(src.turn_first[d]), int(src.turn_first[d + 1]))
        assert [src.turn(t).tolist() for t in turns] == [tok.encode(t.text) for t in dialogues[d]]
        assert src.role[list(turns)].tolist() == D.roles(dialogues[d])
    assert obj.eval_source.num_dialogues == cfg.data.eval_documents
    assert obj.train_source.num_dialogues == src.num_dialogues - cfg.data.eval_documents


def test_examples_fake_rate_roles_and_fake_source(dlm):
    cfg, corpus, obj = dlm
    src, special = obj.train_source, corpus.special
    responses = src.responses()
    n, fakes, turns, coincide = 3000, 0, [], 0
    for i in range(n):
        ids, roles, fake, k = example(src, responses, i, cfg.data.seed, L, 0.5, True, special)
        fakes += fake
        turns.append(k)
        seps = np.flatnonzero(ids == special.sep)
        assert ids[0] == special.cls and len(seps) == k and seps[-1] == len(ids) - 1 and len(ids) <= L
        # the role of a turn covers its tokens and its [SEP]; [CLS] takes the first turn's role
        bounds = np.concatenate([[0], seps])
        for a, b in itertools.pairwise(bounds):
            assert len(set(roles[a + 1:b + 1].tolist())) == 1
        assert roles[0] == roles[1]
        if i < 500:   # the last turn: the drawn response itself when real, another turn when fake
            end = int(responses[np.random.default_rng([cfg.data.seed, i, 7]).integers(len(responses))])
            last = ids[seps[-2] + 1:-1].tolist()
            same = last == src.turn(end)[:(L - 3) // 2].tolist()
            assert same or fake
            coincide += same and fake
            assert roles[-1] == src.role[end]
            # the turns before it are the dialogue's own turns right before the response, in order
            context = [ids[a + 1:b].tolist() for a, b in zip(np.concatenate([[0], seps[:-2]]), seps[:-1])]
            assert context == [src.turn(t)[:(L - 3) // 2].tolist() for t in range(end - k + 1, end)]
    # Binomial(3000, 0.5): standard deviation 0.0091
    assert abs(fakes / n - 0.5) < 0.03, fakes / n
    assert max(turns) >= 3 and min(turns) >= 2
    assert coincide <= 3   # a fake drawn from another dialogue equal to the real one (a short "Ay.")


def test_stream_masks_only_turn_tokens_and_labels_match(dlm):
    cfg, corpus, obj = dlm
    special = corpus.special
    b = next(obj.train_batches(0, 8, 0, 1))
    masked = b["masked_lm_positions"][b["masked_lm_weights"] > 0]
    assert len(masked) >= 8
    originals = []
    for i in range(8):
        ids, roles, fake, k = example(obj.train_source, obj.train_source.responses(), i, cfg.data.seed, L,
                                      cfg.data.fake_response_prob, True, special)
        originals.append(ids)
        assert b["next_sentence_labels"][i] == fake and b["num_turns"][i] == k
        np.testing.assert_array_equal(b["segment_ids"][i, :len(ids)], roles)
        pos = b["masked_lm_positions"][i][b["masked_lm_weights"][i] > 0]
        assert not np.isin(ids[pos], [special.cls, special.sep]).any()
        np.testing.assert_array_equal(b["masked_lm_ids"][i][b["masked_lm_weights"][i] > 0], ids[pos])


def test_role_embeddings_change_the_output(dlm):
    cfg, _, obj = dlm
    b = {k: jnp.asarray(v[:2]) for k, v in next(obj.train_batches(0, 8, 0, 1)).items()}
    model = ErnieForPreTraining(cfg.model, with_nsp=True)
    params = jax.jit(model.init)(jax.random.key(0), b["input_ids"], b["input_mask"], b["segment_ids"],
                                 b["masked_lm_positions"])

    @jax.jit
    def run(p, roles):
        return model.apply(p, b["input_ids"], b["input_mask"], roles, b["masked_lm_positions"])

    flipped = (1 - b["segment_ids"]) * b["input_mask"]
    mlm_a, cls_a = run(params, b["segment_ids"])
    mlm_b, cls_b = run(params, flipped)
    assert float(jnp.max(jnp.abs(cls_a - cls_b))) > 1e-4 and float(jnp.max(jnp.abs(mlm_a - mlm_b))) > 1e-4
    # with the two role rows made equal, the roles cannot matter: the same output
    table = params["params"]["ernie"]["embeddings"]["token_type_embeddings"]["embedding"]
    value = table.value if hasattr(table, "value") else table
    same = value.at[1].set(value[0])
    params["params"]["ernie"]["embeddings"]["token_type_embeddings"]["embedding"] = (
        table.replace_boxed(same) if hasattr(table, "replace_boxed") else same)
    mlm_a, cls_a = run(params, b["segment_ids"])
    mlm_b, cls_b = run(params, flipped)
    np.testing.assert_allclose(cls_a, cls_b, atol=1e-6)
    np.testing.assert_allclose(mlm_a, mlm_b, atol=1e-5)
