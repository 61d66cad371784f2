"""A tiny sentence-transformers CrossEncoder, built by a test in a directory of its own.

Random weights (seeded), a one-layer BERT and a vocabulary of the words the tests use: it
ranks nothing well, but it loads as a real CrossEncoder does (config, weights, tokenizer),
scores every pair deterministically and spreads its scores (a wide initialisation and no
sigmoid), so the order it gives is clear of ties. Nothing is downloaded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build(path: Path, words: list[str], seed: int = 7) -> Path:
    """Write the model to ``path`` (created) and return it."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    vocab = SPECIAL + sorted({w for text in words for w in re.findall(r"\w+|[^\w\s]", text.lower())})
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    # transformers 5 takes the vocabulary itself (``vocab``); 4.x took ``vocab_file``.
    try:
        tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    except TypeError:
        tokenizer = BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=256, num_labels=1,
                        initializer_range=0.5)
    model = BertForSequenceClassification(config)
    model.eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    # Raw logits (no sigmoid): a random model's sigmoid saturates and would tie.
    saved = json.loads((path / "config.json").read_text())
    saved["sentence_transformers"] = {"activation_fn": "torch.nn.modules.linear.Identity"}
    (path / "config.json").write_text(json.dumps(saved), encoding="utf-8")
    return path


def scores(path: Path, query: str, texts: list[str]) -> list[float]:
    """The model's scores for (query, text), computed in this process."""
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(path), device="cpu", local_files_only=True)
    return [float(s) for s in model.predict([(query, t) for t in texts], show_progress_bar=False)]
