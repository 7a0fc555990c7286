"""Hypothesis strategies for ``fuzz_readers.py``: one per target, producing broken files, directory layouts,
configs and texts (random bytes, NUL bytes, invalid UTF-8, BOMs, CR line ends, huge lines and fields, wrong
JSON types, deep nesting, duplicate ids...)."""
from __future__ import annotations

import json

import numpy as np
from hypothesis import strategies as st

BAD = [b"\x00", b"\xff", b"\xfe\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xef\xbb\xbf", b"\r",
       b"\r\n", b"\t", b"\x1a", b"\x0b", b"\x85", "\u2028".encode()]
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64), st.floats(), st.text(max_size=12))
deep_json = st.integers(1, 20_000).map(lambda n: b"[" * n + b"]" * n)  # nesting past the parser's recursion limit
json_any = st.recursive(json_leaf, lambda c: st.one_of(st.lists(c, max_size=4),
                                                      st.dictionaries(st.text(max_size=8), c, max_size=4)),
                        max_leaves=12)


def mutated(base: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """``base`` with up to 3 bad byte sequences inserted at random offsets, or cut short."""
    @st.composite
    def build(draw):
        data = bytearray(draw(base))
        for _ in range(draw(st.integers(0, 3))):
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.sampled_from(BAD))
        if draw(st.integers(0, 9)) == 0:
            data = data[: draw(st.integers(0, len(data)))]
        return bytes(data)
    return build()


def lines_to_bytes(lines: st.SearchStrategy[list[str]]) -> st.SearchStrategy[bytes]:
    return st.tuples(lines, st.sampled_from(["\n", "\r\n", "\r"]), st.booleans()).map(
        lambda t: (t[1].join(t[0]) + (t[1] if t[2] else "")).encode("utf-8"))


def maybe(s: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly ``s``; sometimes any JSON value of the wrong type, as a broken file would have."""
    return st.one_of(s, s, s, json_any)


word = st.text(st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=10)
prose = st.lists(word, max_size=12).map(" ".join)
corpus_line = st.one_of(prose, prose.map(lambda s: s + "."), st.just(""), st.text(max_size=30),
                        st.just("*** START OF THE PROJECT GUTENBERG EBOOK X ***"),
                        st.just("*** END OF THE PROJECT GUTENBERG EBOOK X ***"),
                        st.integers(1, 3000).map(lambda n: "long " * n))
corpus_bytes = st.one_of(st.binary(max_size=600), mutated(lines_to_bytes(st.lists(corpus_line, max_size=30))),
                         lines_to_bytes(st.lists(corpus_line, max_size=30)))
corpus_case = st.tuples(corpus_bytes, st.sampled_from(["auto", "lines", "paragraphs", "bogus"]),
                        st.integers(1, 300), st.one_of(st.just(1_000_000), st.integers(1, 700)))


def _glue_pairs() -> list[tuple[str, str]]:
    from ptm_jax.data.tasks.glue import GLUE_TASKS

    return [(t, s) for t, spec in GLUE_TASKS.items() for s in spec.splits]


glue_field = st.one_of(prose, st.sampled_from(["0", "1", "entailment", "not_entailment", "neutral",
                                               "contradiction", "3.5", "nan", "-1", "", '"', "'quoted'"]),
                       st.text(max_size=20), st.integers(0, 140_000).map(lambda n: "x" * n))
glue_row = st.lists(glue_field, max_size=12).map("\t".join)
glue_case = st.tuples(st.sampled_from(_glue_pairs()), st.one_of(
    lines_to_bytes(st.lists(glue_row, max_size=12)), mutated(lines_to_bytes(st.lists(glue_row, max_size=12))),
    st.binary(max_size=300))).map(lambda t: (t[0][0], t[0][1], t[1]))


@st.composite
def squad_paragraph(draw):
    context = draw(st.text(max_size=120))
    qas = []
    for q in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(context)))
        j = draw(st.integers(i, len(context)))
        answers = draw(maybe(st.just([{"text": context[i:j], "answer_start": i}]) |
                             st.lists(st.fixed_dictionaries({"text": maybe(st.text(max_size=8)),
                                                             "answer_start": maybe(st.integers(-3, 200))}),
                                      max_size=2)))
        qa = {"id": draw(maybe(st.sampled_from(["a", "b", "c", f"q{q}"]))), "question": draw(maybe(prose)),
              "answers": answers}
        if draw(st.booleans()):
            qa["is_impossible"] = draw(maybe(st.booleans()))
        qas.append(qa)
    return {"context": draw(maybe(st.just(context))), "qas": draw(maybe(st.just(qas)))}


squad_doc = st.fixed_dictionaries({"version": maybe(st.sampled_from(["1.1", "v2.0"])), "data": maybe(st.lists(
    st.fixed_dictionaries({"title": maybe(st.text(max_size=8)), "paragraphs": maybe(st.lists(
        squad_paragraph(), max_size=3))}), max_size=3))})
squad_json = st.one_of(squad_doc, json_any).map(lambda d: json.dumps(d).encode())
squad_case = st.one_of(squad_json, squad_json, mutated(squad_json), st.binary(max_size=200), deep_json)

ner_tag = st.one_of(st.sampled_from(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-MISC", "B-ORG", "I-", "B-",
                                     "X", "E-PER", "S-LOC"]), word)
conll_line = st.one_of(st.just(""), st.just("-DOCSTART- -X- -X- O"),
                       st.tuples(st.lists(word, min_size=0, max_size=4), ner_tag).map(
                           lambda t: " ".join([*t[0], t[1]])))
conll_case = st.tuples(st.one_of(lines_to_bytes(st.lists(conll_line, max_size=25)),
                                 mutated(lines_to_bytes(st.lists(conll_line, max_size=25))),
                                 st.binary(max_size=200)),
                       st.sampled_from(["auto", "iob1", "iob2", "bogus"]))

vocab_line = st.one_of(st.sampled_from(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "", " ", "##", "hello"]),
                       word, word.map(lambda w: "##" + w), st.text(max_size=6))
vocab_case = st.tuples(st.one_of(
    st.lists(vocab_line, max_size=40).map(lambda v: ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *v]).map(
        lambda v: ("\n".join(v) + "\n").encode()), mutated(lines_to_bytes(st.lists(vocab_line, max_size=40))),
    st.binary(max_size=200)), st.booleans())

any_text = st.one_of(st.text(max_size=300), st.text(st.characters(codec="utf-8"), max_size=300),
                     st.integers(150, 260).map(lambda n: "a" * n), st.lists(word, max_size=60).map(" ".join),
                     st.sampled_from(["", " ", "\x00", "\ufffd", "[MASK]", "##", "\u200b" * 5, "\U0001F600" * 3]))

BERT_KEYS = {"vocab_size": st.integers(-2, 70_000), "hidden_size": st.integers(-1, 96),
             "num_hidden_layers": st.one_of(st.integers(-1, 3), st.sampled_from([2**40, 25 * 10**15, 2.5e16])),
             "num_attention_heads": st.integers(-1, 8),
             "intermediate_size": st.integers(-1, 128), "max_position_embeddings": st.integers(-1, 600),
             "type_vocab_size": st.integers(-1, 3), "hidden_act": st.sampled_from(["gelu", "relu", "tanh", "x"]),
             "hidden_dropout_prob": st.floats(-1, 2), "attention_probs_dropout_prob": st.floats(),
             "layer_norm_eps": st.floats(), "initializer_range": st.floats(),
             "model_type": st.sampled_from(["bert", "gpt2", ""]),
             "position_embedding_type": st.sampled_from(["absolute", "relative_key"]),
             "is_decoder": st.booleans(), "pad_token_id": st.integers(-1, 5)}
SMALL_BERT = {"vocab_size": 12, "hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2,
              "intermediate_size": 8, "max_position_embeddings": 8, "type_vocab_size": 2}
hf_config = st.fixed_dictionaries({}, optional={k: maybe(v) for k, v in BERT_KEYS.items()})
hf_config_case = st.one_of(hf_config.map(lambda c: {**SMALL_BERT, **c}), hf_config, st.sampled_from(
    sorted(BERT_KEYS)).flatmap(lambda k: BERT_KEYS[k].map(lambda v: {**SMALL_BERT, k: v})),
                           st.dictionaries(st.text(max_size=6), json_any, max_size=5))


# byte-level BPE: a valid tiny vocab.json + merges.txt (the 256 byte symbols, a few merges), then mutated
def _byte_bpe_files() -> tuple[bytes, bytes]:
    from ptm_jax.data.byte_bpe import byte_alphabet

    tokens = ["<|endoftext|>", *byte_alphabet(), "Ġt", "he", "Ġthe"]
    vocab = json.dumps({t: i for i, t in enumerate(tokens)}, ensure_ascii=False).encode("utf-8")
    return vocab, "#version: 0.2\nĠ t\nh e\nĠt he\n".encode("utf-8")


merge_line = st.one_of(st.sampled_from(["Ġ t", "h e", "Ġt he", "a", "a b c", "#x", "", "zz zz"]),
                       st.tuples(word, word).map(" ".join))
byte_bpe_case = st.tuples(
    st.one_of(st.just(_byte_bpe_files()[0]), mutated(st.just(_byte_bpe_files()[0])),
              st.dictionaries(st.text(max_size=4), st.integers(-2, 400), max_size=30).map(
                  lambda d: json.dumps(d).encode()), st.binary(max_size=200)),
    st.one_of(st.just(_byte_bpe_files()[1]), mutated(st.just(_byte_bpe_files()[1])),
              lines_to_bytes(st.lists(merge_line, max_size=12)), st.binary(max_size=120)))

GPT2_KEYS = {"vocab_size": st.integers(-2, 70_000), "n_embd": st.integers(-1, 96),
             "n_layer": st.one_of(st.integers(-1, 3), st.sampled_from([2**40, 25 * 10**15, 2.5e16])),
             "n_head": st.integers(-1, 8), "n_positions": st.integers(-1, 2000), "n_inner": st.one_of(
                 st.none(), st.integers(-1, 128)), "activation_function": st.sampled_from(["gelu_new", "relu", "x"]),
             "layer_norm_epsilon": st.floats(), "initializer_range": st.floats(),
             "resid_pdrop": st.floats(-1, 2), "attn_pdrop": st.floats(), "embd_pdrop": st.floats(),
             "model_type": st.sampled_from(["gpt2", "bert", ""])}
SMALL_GPT2 = {"model_type": "gpt2", "vocab_size": 12, "n_embd": 4, "n_layer": 1, "n_head": 2, "n_positions": 8}
XLNET_KEYS = {"vocab_size": st.integers(-2, 70_000), "d_model": st.integers(-1, 96),
              "n_layer": st.one_of(st.integers(-1, 3), st.sampled_from([2**40, 25 * 10**15])),
              "n_head": st.integers(-1, 8), "d_head": st.integers(-1, 16), "d_inner": st.integers(-1, 128),
              "ff_activation": st.sampled_from(["relu", "gelu", "x"]), "untie_r": maybe(st.booleans()),
              "attn_type": st.sampled_from(["bi", "uni", "x"]), "mem_len": st.one_of(st.none(), st.integers(-5, 64)),
              "clamp_len": st.integers(-5, 10**12), "layer_norm_eps": st.floats(), "dropout": st.floats(-1, 2),
              "bi_data": maybe(st.booleans()), "same_length": maybe(st.booleans())}
SMALL_XLNET = {"model_type": "xlnet", "vocab_size": 12, "d_model": 8, "n_layer": 1, "n_head": 2, "d_head": 4, "d_inner": 8}


def _family_config(keys: dict, small: dict) -> st.SearchStrategy:
    some = st.fixed_dictionaries({}, optional={k: maybe(v) for k, v in keys.items()})
    return st.one_of(some.map(lambda c: {**small, **c}), some, st.sampled_from(sorted(keys)).flatmap(
        lambda k: keys[k].map(lambda v: {**small, k: v})), st.dictionaries(st.text(max_size=6), json_any, max_size=5))


gpt2_config_case = _family_config(GPT2_KEYS, SMALL_GPT2)
xlnet_config_case = _family_config(XLNET_KEYS, SMALL_XLNET)


@st.composite
def hf_dir_case(draw):
    """config.json (+ modules.json) + a model.safetensors with the config's tensors, some of them broken."""
    from safetensors.numpy import save

    from ptm_jax.families.bert.config import BertConfig
    from ptm_jax.families.bert.hf import all_rules

    files: dict[str, bytes] = {}
    cfg = {**SMALL_BERT, **draw(hf_config)} if draw(st.booleans()) else dict(SMALL_BERT)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##c", "d", "e", "f", "g"]
    files["vocab.txt"] = draw(st.one_of(st.just("\n".join(vocab).encode()), st.just("\n".join(vocab).encode()),
                                        vocab_case.map(lambda v: v[0])))
    files["config.json"] = draw(st.one_of(st.just(json.dumps(cfg).encode()), deep_json,
                                          mutated(st.just(json.dumps(cfg).encode())), st.binary(max_size=60)))
    if draw(st.integers(0, 5)) == 0:
        files["modules.json"] = draw(st.one_of(json_any.map(lambda v: json.dumps(v).encode()),
                                               st.binary(max_size=40)))
    mc = BertConfig(vocab_size=12, hidden_size=4, num_layers=1, num_heads=2, intermediate_size=8,
                     max_position_embeddings=8)
    head = draw(st.sampled_from(["encoder", "pretraining", "sequence_classification"]))
    tensors = {r.hf: np.zeros(r.hf_shape, np.float32) for r in all_rules(mc, head, 2, head != "encoder")}
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(sorted(tensors)))
        kind = draw(st.sampled_from(["drop", "reshape", "int", "f16", "extra"]))
        if kind == "drop":
            tensors.pop(name, None)
        elif kind == "reshape":
            tensors[name] = np.zeros((3,), np.float32)
        elif kind == "int":
            tensors[name] = np.zeros(tensors.get(name, np.zeros(1)).shape, np.int64)
        elif kind == "f16":
            tensors[name] = tensors.get(name, np.zeros(1)).astype(np.float16)
        else:
            tensors[draw(word)] = np.zeros((2,), np.float32)
    weights = save(tensors) if tensors else b""
    files["model.safetensors"] = draw(st.one_of(st.just(weights), st.just(weights), mutated(st.just(weights[:64])),
                                                st.binary(max_size=40)))
    return files


toml_value = st.one_of(st.integers(-5, 10**6).map(str), st.floats(allow_nan=False).map(repr),
                       st.sampled_from(["true", "false", '"x"', "'bert_tiny'", "[1, 2]", "{a = 1}", "nan",
                                        '"embedded"', "1e400", "0x10"]), st.text(max_size=8).map(json.dumps))
toml_key = st.sampled_from(["vocab_size", "hidden_size", "num_heads", "steps", "batch_size", "kind", "corpus",
                            "max_seq_length", "learning_rate", "data", "extends", "name", "bogus"])
toml_line = st.one_of(st.sampled_from(["[model]", "[train]", "[data]", "[tokenizer]", "[mesh]", "[bogus]",
                                       "[[model]]", "", "extends = 'bert_tiny'", "extends = 'nope'", "extends = 5",
                                       "extends = ['bert_tiny']", "a = " + "[" * 3000 + "]" * 3000]),
                      st.tuples(toml_key, toml_value).map(lambda t: f"{t[0]} = {t[1]}"), st.text(max_size=20))
override = st.one_of(st.tuples(st.sampled_from(["train.steps", "model.hidden_size", "data.masked_lm_prob",
                                                "mesh.data", "objective", "train", "x.y.z", "model..a"]),
                               st.one_of(toml_value, st.text(max_size=10))).map("=".join), st.text(max_size=12))
config_case = st.tuples(st.one_of(mutated(lines_to_bytes(st.lists(toml_line, max_size=15))),
                                  lines_to_bytes(st.lists(toml_line, max_size=15)), st.binary(max_size=100)),
                        st.lists(override, max_size=3))

CACHE_FILES = ["meta.json", "tokens.int32.bin", "sentence_offsets.int64.bin", "doc_offsets.int64.bin",
               "doc_keys.int64.bin", "COMPLETE"]
cache_edit = st.one_of(
    st.tuples(st.sampled_from(CACHE_FILES), st.just("delete"), st.none()),
    st.tuples(st.sampled_from(CACHE_FILES), st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.sampled_from(CACHE_FILES), st.just("append"), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("meta.json"), st.just("meta"), st.tuples(st.sampled_from(
        ["num_docs", "num_sentences", "num_tokens", "format_version", "fingerprint"]), json_any)),
    st.tuples(st.sampled_from(CACHE_FILES), st.just("replace"), st.binary(max_size=40)))
cache_case = st.lists(cache_edit, max_size=3)

STRATEGIES: dict[str, st.SearchStrategy] = {
    "corpus.read_documents": corpus_case, "glue.read_glue": glue_case, "squad.read_squad": squad_case,
    "conll.read_conll": conll_case, "tokenizers.read_vocab+WordPiece": vocab_case,
    "WordPiece.encode": any_text, "SentencePiece.encode": any_text,
    "hf_bert.model_config_from_hf": hf_config_case, "hf_bert.import_hf(dir)": hf_dir_case(),
    "config.load_config(toml)": config_case, "cache.TokenCache.open": cache_case,
    "byte_bpe.vocab.json+merges.txt": byte_bpe_case, "ByteBPE.encode": any_text,
    "hf_gpt2.model_config_from_hf_gpt2": gpt2_config_case, "hf_xlnet.model_config_from_hf": xlnet_config_case,
}
