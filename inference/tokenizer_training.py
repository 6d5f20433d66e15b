"""Train the small byte-level BPE tokenizer that every random checkpoint ships.

No GLM tokenizer can be downloaded here, so tests and demos use this one: trained in about a second
on the text under inference/data/tokenizer_corpus, deterministic, with all GLM-5.x special tokens
appended after the base vocabulary (the real tokenizer's layout, at much smaller ids).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

from inference.chat.special_tokens import SPECIAL_TOKENS
from inference.chat.template import ChatTemplate

DEFAULT_VOCAB_SIZE = 1024


def corpus_texts() -> list[str]:
    folder = resources.files("inference").joinpath("data", "tokenizer_corpus")
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".txt"))
    return [folder.joinpath(n).read_text(encoding="utf-8") for n in names]


@lru_cache(maxsize=4)
def _trained_tokenizer_json(vocab_size: int) -> str:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size <= 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size: got {vocab_size}; must exceed 256 bytes + {len(SPECIAL_TOKENS)} special tokens")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # One line per training sequence: stable input order keeps the merges deterministic.
    lines = [line for text in corpus_texts() for line in text.splitlines(keepends=True)]
    tok.train_from_iterator(lines, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tok.to_str(pretty=False)


def write_tokenizer_files(out_dir: str | Path, variant: str = "glm-5.2", vocab_size: int = DEFAULT_VOCAB_SIZE) -> dict:
    """Write tokenizer.json, tokenizer_config.json and chat_template.jinja into out_dir.

    Returns {"vocab_size": total ids including special tokens, "special_tokens": {token: id}}.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer_json = _trained_tokenizer_json(vocab_size)
    data = json.loads(tokenizer_json)
    special = {t["content"]: t["id"] for t in data["added_tokens"]}
    total = max(max(data["model"]["vocab"].values()), *special.values()) + 1

    template = ChatTemplate(variant).jinja_source()
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "padding_side": "left",
        "clean_up_tokenization_spaces": False,
        "do_lower_case": False,
        "model_max_length": 1048576 if variant != "glm-5" else 202752,
        "chat_template": template,
    }
    (out / "tokenizer.json").write_text(tokenizer_json, encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    return {"vocab_size": total, "special_tokens": special}
