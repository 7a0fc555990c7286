"""ERNIE 1.0's config sections (Sun et al. 2019, "ERNIE: Enhanced Representation through Knowledge
Integration", Sec. 3.2). The network is BERT's, so ``[model]`` is BERT's section under the family name "ernie";
``[data]`` adds to BERT's masking fields where the knowledge units come from and when the masking level steps
from basic to phrase to entity units (the paper's three stages)."""
from __future__ import annotations

from dataclasses import dataclass

from ptm_jax.errors import ConfigError
from ptm_jax.families.bert.config import BertConfig, BertDataConfig

UNIT_SOURCES = ("lexicon", "pmi", "spans", "jieba")
LEVELS = ("basic", "phrase", "entity")


@dataclass
class ErnieConfig(BertConfig):
    """BERT's encoder (ERNIE 1.0 uses BERT-base's shape); the params trunk is keyed "ernie" (``model.py``)."""

    family: str = "ernie"


@dataclass
class ErnieDataConfig(BertDataConfig):
    """Knowledge-masking examples: BERT's MLM(+NSP) stream whose masked units are whole phrases and entities.

    ``masked_lm_prob`` and ``max_predictions_per_seq`` bound the masked *tokens* per sequence; a unit is taken
    whole or not at all (``families/ernie/units.py``, ``data.py``)."""

    unit_sources: str = ""
    """Comma-separated sources of phrase/entity units, applied in this order of precedence: 'spans' (the span
    file), 'lexicon' (the lexicon file, longest match first), 'jieba' (Chinese words, phrases and entities from
    jieba's segmentation and dictionary: ``chinese_units.py``), 'pmi' (word2phrase phrases found in the corpus).
    Empty: basic units only."""
    lexicon_file: str = ""
    """'lexicon': one unit per line, ``KIND<TAB>TEXT``, KIND 'phrase' or 'entity'; '#' starts a comment line."""
    span_file: str = ""
    """'spans': one unit per line, ``DOC<TAB>START<TAB>END<TAB>KIND``: document index in the token cache, token
    offsets [START, END) within that document's tokens, KIND 'phrase' or 'entity'."""
    phrase_min_count: int = 5
    """'pmi': word2phrase's -min-count (words and bigrams rarer than this never form a phrase)."""
    phrase_threshold: float = 100.0
    """'pmi': word2phrase's -threshold on (count(ab) - min_count) / (count(a) count(b)) * N."""
    phrase_from_step: int = 0
    """The training step from which phrase units are masked (before it: basic units only)."""
    entity_from_step: int = 0
    """The training step from which entity units are masked too (0 with phrase_from_step 0: from the start)."""
    dialogue_file: str = ""
    """``ernie_dlm``: the dialogue file(s) (comma-separated paths; ``dialogue.py``). Empty: the files of
    ``data.corpus``."""
    dialogue_format: str = "turns"
    """``ernie_dlm``: 'turns' (a ``SPEAKER: text`` line per turn, a blank line between dialogues) or 'script'
    (tiny-shakespeare: a ``Speaker:`` line, the speech's lines, a blank line; consecutive speeches form
    dialogues of ``dialogue_turns`` turns)."""
    dialogue_turns: int = 6
    """``ernie_dlm``, 'script' format: speeches per dialogue."""
    fake_response_prob: float = 0.5
    """``ernie_dlm``: probability that an example's last turn is replaced by a random turn of another dialogue
    (the real/fake response label 1)."""

    def sources(self) -> tuple[str, ...]:
        return tuple(s.strip() for s in self.unit_sources.split(",") if s.strip())

    def level_at(self, step: int) -> int:
        """Masking level at a training step: 0 basic, 1 phrase, 2 entity (``LEVELS``)."""
        return int(step >= self.phrase_from_step) + int(step >= self.entity_from_step)

    def validate(self, where: str = "data") -> None:
        super().validate(where)
        unknown = [s for s in self.sources() if s not in UNIT_SOURCES]
        if unknown:
            raise ConfigError(f"{where}.unit_sources names {unknown}; known: {', '.join(UNIT_SOURCES)}")
        for src, field in (("lexicon", "lexicon_file"), ("spans", "span_file")):
            if src in self.sources() and not getattr(self, field):
                raise ConfigError(f"{where}.unit_sources has {src!r} but {where}.{field} is empty: set the file")
        if self.whole_word_masking:
            raise ConfigError(f"{where}.whole_word_masking does not apply to ERNIE: its basic unit is a token and "
                              f"its larger units come from {where}.unit_sources; set it to false")
        if not 0 <= self.phrase_from_step <= self.entity_from_step:
            raise ConfigError(f"{where}.phrase_from_step={self.phrase_from_step} and {where}.entity_from_step="
                              f"{self.entity_from_step} must satisfy 0 <= phrase_from_step <= entity_from_step")
        if self.dialogue_format not in ("turns", "script"):
            raise ConfigError(f"{where}.dialogue_format={self.dialogue_format!r}: expected 'turns' or 'script'")
        if self.dialogue_turns < 2:
            raise ConfigError(f"{where}.dialogue_turns={self.dialogue_turns} must be >= 2 (a query and a response)")
        if not 0.0 <= self.fake_response_prob <= 1.0:
            raise ConfigError(f"{where}.fake_response_prob={self.fake_response_prob} must be in [0, 1]")
        if self.phrase_min_count < 1 or self.phrase_threshold < 0:
            raise ConfigError(f"{where}.phrase_min_count must be >= 1 and {where}.phrase_threshold >= 0")
