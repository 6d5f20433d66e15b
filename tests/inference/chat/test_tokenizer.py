from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from inference.chat.special_tokens import SPECIAL_TOKENS
from inference.tokenizer import Tokenizer
from inference.tokenizer_training import write_tokenizer_files


def test_training_is_deterministic_small_and_has_every_glm_special_token(tmp_path, tokenizer_dir):
    info = write_tokenizer_files(tmp_path / "again")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (tmp_path / "again" / name).read_bytes() == (tokenizer_dir / name).read_bytes()
    assert info["vocab_size"] <= 1024
    assert list(info["special_tokens"]) == list(SPECIAL_TOKENS)
    ids = list(info["special_tokens"].values())
    assert ids == list(range(ids[0], ids[0] + len(ids))) and ids[-1] == info["vocab_size"] - 1
    config = json.loads((tmp_path / "again" / "tokenizer_config.json").read_text())
    assert config["chat_template"] == (tmp_path / "again" / "chat_template.jinja").read_text()


def test_tokenizer_knows_special_tokens_and_stops(tokenizer):
    assert tokenizer.missing_glm_tokens() == []
    st_ids = tokenizer.special_tokens
    assert tokenizer.stop_token_ids == [st_ids["<|endoftext|>"], st_ids["<|user|>"], st_ids["<|observation|>"]]
    ids = tokenizer.encode("[gMASK]<sop><|user|>hi")
    assert ids[:3] == [st_ids["[gMASK]"], st_ids["<sop>"], st_ids["<|user|>"]]
    assert tokenizer.vocab_size <= 1024


def test_transformers_loads_the_same_tokenizer(tokenizer_dir, tokenizer):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(tokenizer_dir)
    text = "[gMASK]<sop><|user|>héllo wörld, 日本語 🙂\n\tdef f(x): return x<|assistant|><think>"
    assert hf.encode(text, add_special_tokens=False) == tokenizer.encode(text)
    assert hf.decode(tokenizer.encode(text)) == text


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=60), cuts=st.lists(st.integers(min_value=1, max_value=4), max_size=30))
def test_incremental_detokenizer_never_emits_broken_characters(tokenizer, text, cuts):
    ids = tokenizer.encode(text)
    det = tokenizer.detokenizer()
    pieces, i = [], 0
    for n in cuts + [len(ids)]:
        piece = det.push(ids[i : i + n])
        assert "\ufffd" not in piece or "\ufffd" in text
        pieces.append(piece)
        i += n
    pieces.append(det.flush())
    assert "".join(pieces) == tokenizer.decode(ids) == text


def test_generic_detokenizer_path_matches(tokenizer_dir):
    tok = Tokenizer.from_pretrained(tokenizer_dir)
    tok.__dict__["token_bytes"] = None  # force the window-decoding path used for non byte-level vocabularies
    text = "naïve 🙂 日本 <|user|> end"
    det = tok.detokenizer()
    out = "".join(det.push(i) for i in tok.encode(text)) + det.flush()
    assert out == text
    skipping = tok.detokenizer(skip_special_tokens=True)
    assert "".join(skipping.push(i) for i in tok.encode(text)) + skipping.flush() == "naïve 🙂 日本  end"
