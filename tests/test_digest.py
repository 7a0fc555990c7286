"""Digests that name cached files (ptm_jax/digest.py) tell apart sequences a separator-joined digest confused:
another split of the same characters into parts, and a part holding the separator character itself."""
from __future__ import annotations

import hashlib

from ptm_jax import digest
from ptm_jax.data import tokenizer_cache
from ptm_jax.data.embedded import document_digest


def test_another_split_of_the_same_characters_gives_another_digest():
    assert digest.sha256("ab", "c") != digest.sha256("a", "bc")
    assert digest.sha256("a\x1eb") != digest.sha256("a", "b")
    assert digest.sha256("", "a") != digest.sha256("a", "")
    assert digest.sha256("ab", "c") == digest.sha256(b"ab", "c"), "str parts are their UTF-8 bytes"


def test_the_digest_is_the_length_prefixed_sha256():
    h = hashlib.sha256(b"\x03\x00\x00\x00\x00\x00\x00\x00h\xc3\xa9" + bytes(8))
    assert digest.sha256("hé", "") == h.hexdigest()


def test_tokenizer_samples_split_differently_are_different_cache_entries():
    settings = {"kind": "wordpiece", "vocab_size": 100}
    key = tokenizer_cache.sample_key
    assert key(settings, ["a\x1eb"]) != key(settings, ["a", "b"])
    assert key(settings, ["ab", "c"]) != key(settings, ["a", "bc"])
    assert key(settings, ["ab", "c"]) == key(settings, iter(["ab", "c"])), "a stream digests as its list"


def test_corpora_split_differently_into_sentences_or_documents_have_different_digests():
    assert document_digest([["a\x1fb"]]) != document_digest([["a", "b"]])
    assert document_digest([["a"], ["b"]]) != document_digest([["a", "b"]])
    assert document_digest([["a\x1e", "b"]]) != document_digest([["a"], ["b"]])
    assert document_digest([["a", "b"]]) == document_digest(iter([("a", "b")]))


def test_regrouping_the_same_parts_gives_another_nested_digest_and_a_stream_digests_as_its_list():
    def nested(groups):
        h = hashlib.sha256()
        digest.update_nested(h, groups)
        return h.hexdigest()

    assert nested([["a", "b"], ["c"]]) != nested([["a"], ["b", "c"]])
    assert nested([["a", "b"]]) != nested([["a"], ["b"]])
    assert nested([[], ["a"]]) != nested([["a"], []])
    assert nested([("a", "b"), ("c",)]) == nested(iter([iter(["a", "b"]), ["c"]]))
    assert nested([["x"]]) == hashlib.sha256(bytes([1]) + bytes(7) + bytes([1]) + bytes(7) + b"x").hexdigest()
