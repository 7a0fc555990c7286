"""Digests of sequences of strings that no other sequence shares.

Each part goes into the hash preceded by its length in bytes (8, little-endian), so neither another split of the
same characters into parts nor a separator character inside a part gives another sequence's digest (a digest of
parts joined by a separator character cannot promise that). Used to name cached files: trained tokenizers by
their sample, feature stores by their sentences, and a tokenizer's or corpus's identity.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable


def update(h, parts: Iterable[bytes | str]) -> None:
    """Feeds ``parts`` to the hash object ``h``, each preceded by its length (str: its UTF-8 bytes; lone
    surrogates, as a filesystem name may hold, pass through)."""
    for p in parts:
        b = p.encode("utf-8", errors="surrogatepass") if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)


def update_nested(h, groups: Iterable[Iterable[bytes | str]]) -> None:
    """Feeds each group of ``groups`` (a document's sentences, a sentence's words): its part count, then its parts
    as :func:`update` does, so no regrouping of the same parts gives the same bytes."""
    for group in groups:
        parts = list(group)
        h.update(len(parts).to_bytes(8, "little"))
        update(h, parts)


def sha256(*parts: bytes | str) -> str:
    """The hex sha256 of ``parts``, length-prefixed as :func:`update` feeds them."""
    h = hashlib.sha256()
    update(h, parts)
    return h.hexdigest()
