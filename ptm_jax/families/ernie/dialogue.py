"""Dialogues for ERNIE's dialogue language model (Sun et al. 2019, Sec. 3.3 "Dialogue Language Model"): reading
dialogue files, the query/response roles, and the tokenized dialogues built once beside the token cache
(``Pretraining.artifacts["dialogues"]``).

Two file formats (``data.dialogue_format``):

* ``turns``: one turn per line, ``SPEAKER: text`` (the speaker is the text before the first ':', 1 to 64
  characters, no tab; the text after it must not be empty); a blank line ends a dialogue; a line starting with
  '#' is a comment. A non-blank line without a speaker is an error naming the file and line.
* ``script``: a play script as in tiny-shakespeare: a speech is a ``Speaker:`` line followed by its lines, a blank
  line ends the speech; the speech's lines are joined with spaces into one turn. A speech with no lines (the
  speaker line alone) is skipped. Consecutive turns form dialogues of ``data.dialogue_turns`` turns (a last
  dialogue of a single turn is dropped). A speech that does not start with a ``Speaker:`` line is an error
  naming the file and line. :func:`script_to_turns` writes a script as a ``turns`` file.

Roles: the speaker of a dialogue's first turn asks (role 0, Q); every turn of that speaker is a query and every
turn of another speaker a response (role 1, R). Speakers that alternate give Q R Q R ...; the paper's QRR and QQR
arise when one side speaks twice. The roles are the ids of the dialogue-role embedding, which takes the place of
BERT's segment embedding.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from ptm_jax import fs
from ptm_jax.errors import ConfigError, DataError

QUERY, RESPONSE = 0, 1
MAX_SPEAKER_CHARS = 64
FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class DialogueTurn:
    speaker: str
    text: str
    line: int
    """1-based line of the file where the turn starts."""


def roles(dialogue: list[DialogueTurn]) -> list[int]:
    """QUERY for the turns of the dialogue's first speaker, RESPONSE for every other speaker's turns."""
    first = dialogue[0].speaker
    return [QUERY if t.speaker == first else RESPONSE for t in dialogue]


def _lines(path: str) -> list[str]:
    if not fs.exists(path):
        raise DataError(f"dialogue file {path} does not exist; set data.dialogue_file to an existing file")
    try:
        return fs.read_bytes(path).decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise DataError(f"dialogue file {path}: not UTF-8 text ({e}); convert it to UTF-8") from None


def _speaker(line: str) -> str | None:
    head, sep, _ = line.partition(":")
    head = head.strip()
    if not sep or not head or len(head) > MAX_SPEAKER_CHARS or "\t" in head:
        return None
    return head


def read_turns(path: str) -> list[list[DialogueTurn]]:
    """The dialogues of a ``turns`` file."""
    dialogues: list[list[DialogueTurn]] = []
    current: list[DialogueTurn] = []
    for n, line in enumerate(_lines(path), 1):
        if not line.strip():
            if current:
                dialogues.append(current)
            current = []
            continue
        if line.lstrip().startswith("#"):
            continue
        speaker = _speaker(line)
        if speaker is None:
            raise DataError(f"dialogue file {path}, line {n}: no speaker role: expected 'SPEAKER: text' (a speaker "
                            f"of 1-{MAX_SPEAKER_CHARS} characters before the first ':'), got {line[:80]!r}; add "
                            "the speaker or delete the line")
        text = line.partition(":")[2].strip()
        if not text:
            raise DataError(f"dialogue file {path}, line {n}: the turn of {speaker!r} has no text; delete the line")
        current.append(DialogueTurn(speaker, text, n))
    if current:
        dialogues.append(current)
    return dialogues


def read_script(path: str, turns_per_dialogue: int) -> list[list[DialogueTurn]]:
    """The dialogues of a ``script`` file: consecutive speeches in groups of ``turns_per_dialogue``."""
    turns: list[DialogueTurn] = []
    block: list[tuple[int, str]] = []

    def speech() -> None:
        if not block:
            return
        n, head = block[0]
        speaker = _speaker(head) if head.rstrip().endswith(":") else None
        if speaker is None or head.strip()[:-1].strip() != speaker:
            raise DataError(f"dialogue file {path}, line {n}: a speech must start with a 'Speaker:' line (the "
                            f"script format: speaker line, the speech's lines, a blank line), got {head[:80]!r}; "
                            "add the speaker line")
        text = " ".join(s.strip() for _, s in block[1:] if s.strip())
        if text:
            turns.append(DialogueTurn(speaker, text, n))
        block.clear()

    for n, line in enumerate(_lines(path), 1):
        if line.strip():
            block.append((n, line))
        else:
            speech()
    speech()
    groups = [turns[i:i + turns_per_dialogue] for i in range(0, len(turns), turns_per_dialogue)]
    return [g for g in groups if len(g) >= 2]


def read_dialogues(path: str, fmt: str, turns_per_dialogue: int = 6) -> list[list[DialogueTurn]]:
    if fmt == "turns":
        return read_turns(path)
    if fmt == "script":
        return read_script(path, turns_per_dialogue)
    raise ConfigError(f"data.dialogue_format={fmt!r}: expected 'turns' or 'script'")


def script_to_turns(src: str, dst: str | Path, turns_per_dialogue: int = 6) -> int:
    """Writes the dialogues of script ``src`` as a ``turns`` file ``dst``; returns the number of dialogues."""
    dialogues = read_script(src, turns_per_dialogue)
    out = "\n\n".join("\n".join(f"{t.speaker}: {t.text}" for t in d) for d in dialogues) + "\n"
    Path(dst).write_text(out, encoding="utf-8")
    return len(dialogues)


def dialogue_files(dcfg: Any) -> list[str]:
    """The files ``ernie_dlm`` reads: ``data.dialogue_file``, else the files of ``data.corpus``."""
    spec = dcfg.dialogue_file.strip() or dcfg.corpus.strip()
    if spec == "embedded" or spec.startswith("tfds:"):
        raise ConfigError(f"objective 'ernie_dlm' reads dialogue files, but data.dialogue_file is empty and "
                          f"data.corpus={dcfg.corpus!r} is not a file: set data.dialogue_file")
    from ptm_jax.data.corpus import resolve_files

    return [str(p) for p in resolve_files(spec)]


# -- tokenized dialogues ------------------------------------------------------------------------------------------
class DialogueSource:
    """Tokenized dialogues: dialogue ``d`` has turns ``turn_first[d] .. turn_first[d+1]-1``; turn ``t`` has the
    tokens ``tokens[tok_first[t]:tok_first[t+1]]`` and role ``role[t]``."""

    def __init__(self, tokens: np.ndarray, tok_first: np.ndarray, role: np.ndarray, turn_first: np.ndarray):
        self.tokens, self.tok_first, self.role, self.turn_first = tokens, tok_first, role, turn_first
        self.num_dialogues = len(turn_first) - 1
        self.num_turns = len(role)

    def turn(self, t: int) -> np.ndarray:
        return self.tokens[self.tok_first[t]:self.tok_first[t + 1]]

    def dialogue_of(self, t: np.ndarray | int) -> np.ndarray:
        return np.searchsorted(self.turn_first, t, side="right") - 1

    def subset(self, first: int, last: int) -> DialogueSource:
        """Dialogues [first, last) as a source of their own."""
        t0, t1 = int(self.turn_first[first]), int(self.turn_first[last])
        k0, k1 = int(self.tok_first[t0]), int(self.tok_first[t1])
        return DialogueSource(self.tokens[k0:k1], self.tok_first[t0:t1 + 1] - k0, self.role[t0:t1],
                              self.turn_first[first:last + 1] - t0)

    def responses(self) -> np.ndarray:
        """DialogueTurn indices that may end an example: every turn but a dialogue's first."""
        first = np.zeros(self.num_turns, bool)
        first[self.turn_first[:-1]] = True
        return np.flatnonzero(~first)


def tokenize_dialogues(dialogues: list[list[DialogueTurn]], tokenizer: Any) -> DialogueSource:
    """Turns with no tokens are dropped (after the roles are read); so are dialogues left with one turn."""
    texts = [t.text for d in dialogues for t in d]
    flat, lengths = tokenizer.encode_batch_flat(texts) if texts else (np.zeros(0, np.int32), np.zeros(0, np.int64))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens, tok_first, role, turn_first = [], [0], [], [0]
    i = 0
    for d in dialogues:
        kept = []
        for t, r in zip(d, roles(d)):
            if lengths[i]:
                kept.append((flat[offsets[i]:offsets[i + 1]], r))
            i += 1
        if len(kept) < 2:
            continue
        for ids, r in kept:
            tokens.append(ids)
            tok_first.append(tok_first[-1] + len(ids))
            role.append(r)
        turn_first.append(len(role))
    return DialogueSource(np.concatenate(tokens).astype(np.int32) if tokens else np.zeros(0, np.int32),
                          np.asarray(tok_first, np.int64), np.asarray(role, np.int8), np.asarray(turn_first, np.int64))


def _fingerprint(dcfg: Any, files: list[str], tokenizer: Any) -> str:
    parts = {"version": FORMAT_VERSION, "format": dcfg.dialogue_format, "turns": dcfg.dialogue_turns,
             "tokenizer": tokenizer.fingerprint(),
             "files": [(f, hashlib.sha256(fs.read_bytes(f)).hexdigest()) for f in files]}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def build_dialogues(cfg: Any, corpus: Any, directory: Any) -> DialogueSource | None:
    """``Pretraining.artifacts["dialogues"]``: the tokenized dialogues of an ``ernie_dlm`` run (None for the other
    objectives), computed once by process 0 into ``<cache_dir>/artifacts/dialogues`` (rebuilt when the files,
    the format or the tokenizer change) and loaded by every process."""
    if cfg.objective != "ernie_dlm":
        return None
    import jax

    from ptm_jax.parallel.distributed import barrier

    files = dialogue_files(cfg.data)
    key = _fingerprint(cfg.data, files, corpus.tokenizer)
    meta_path, arrays_path = directory / "dialogues.json", directory / "dialogues.npz"
    if jax.process_index() == 0 and not (fs.exists(meta_path)
                                         and json.loads(fs.read_text(meta_path)).get("fingerprint") == key):
        dialogues = [d for f in files for d in read_dialogues(f, cfg.data.dialogue_format, cfg.data.dialogue_turns)]
        src = tokenize_dialogues(dialogues, corpus.tokenizer)
        if src.num_dialogues < 2:
            raise DataError(f"dialogue file(s) {', '.join(files)}: {src.num_dialogues} dialogue(s) of at least two "
                            "non-empty turns; the dialogue LM needs at least 2 (fake responses come from another "
                            "dialogue)")
        buf = io.BytesIO()
        np.savez(buf, tokens=src.tokens, tok_first=src.tok_first, role=src.role, turn_first=src.turn_first)
        fs.makedirs(directory)
        fs.write_bytes_atomic(arrays_path, buf.getvalue())
        fs.write_text_atomic(meta_path, json.dumps({"fingerprint": key, "dialogues": src.num_dialogues,
                                                    "turns": src.num_turns, "tokens": len(src.tokens)}))
    barrier("ernie_dialogues")
    with np.load(io.BytesIO(fs.read_bytes(arrays_path))) as z:
        return DialogueSource(z["tokens"], z["tok_first"], z["role"], z["turn_first"])
