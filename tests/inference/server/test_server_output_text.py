"""Generated ids -> API text: split-independent, stop strings and the stop token left out."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from inference.server.output_text import OutputText
from inference.chat.template import detect_variant
from inference.chat.template import ChatTemplate
from inference.chat.variants import VARIANTS


def _run(tokenizer, ids, cuts, stops, final_stop):
    out, i = OutputText(tokenizer, stops), 0
    pieces = []
    bounds = sorted({c % (len(ids) + 1) for c in cuts})
    chunks = [ids[a:b] for a, b in zip([0, *bounds], [*bounds, len(ids)])]
    for n, chunk in enumerate(chunks):
        last = n == len(chunks) - 1
        pieces.append(out.push(chunk, final_stop if last else None))
    pieces.append(out.finish())
    return "".join(pieces)


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet="ab éx🙂<>", max_size=30), stop=st.text(alphabet="ab éx", min_size=1, max_size=3),
       cuts=st.lists(st.integers(0, 100), max_size=8))
def test_stop_string_is_cut_however_the_ids_arrive(tokenizer, text, stop, cuts):
    ids = tokenizer.encode(text)
    decoded = tokenizer.decode(ids)
    if stop in decoded:
        # The engine stops on the token that completes the stop string.
        end = next(k for k in range(1, len(ids) + 1) if stop in tokenizer.decode(ids[:k]))
        got = _run(tokenizer, ids[:end], cuts, [stop], stop)
        assert got == decoded[: decoded.index(stop)]
    else:
        assert _run(tokenizer, ids, cuts, [stop], None) == decoded


def test_stop_token_is_left_out(tokenizer):
    stop_id = tokenizer.special_tokens["<|observation|>"]
    ids = tokenizer.encode("done") + [stop_id]
    assert _run(tokenizer, ids, [1], [], stop_id) == "done"


def test_detect_variant():
    for name in VARIANTS:
        assert detect_variant(ChatTemplate(name).jinja_source()) == name
    edited = ChatTemplate("glm-5.3-flash").jinja_source().replace("Horizon", "someone")
    assert detect_variant(edited) == "glm-5.3-flash"
    assert detect_variant("{{ messages }}") == "glm-5" and detect_variant(None) == "glm-5.2"
