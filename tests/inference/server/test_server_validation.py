"""400 messages name the deepest problem in the client's own keys, not pydantic's union labels."""

from __future__ import annotations

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from inference.server.anthropic.protocol import MessagesRequest
from inference.server.responses.protocol import ResponsesRequest
from inference.server.validation import request_error

CLAUDE = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
OPENAI = {"model": "m", "input": "x"}


def _message(model, body) -> str:
    with pytest.raises(ValidationError) as info:
        model.model_validate(body)
    errors = [{**e, "loc": ("body", *e["loc"])} for e in info.value.errors()]
    return request_error(RequestValidationError(errors, body=body)).message


@pytest.mark.parametrize("model, body, expected", [
    (MessagesRequest, {**CLAUDE, "messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "messages.0.content.0.text: Field required (got missing)"),
    (MessagesRequest, {**CLAUDE, "tool_choice": {"type": "tool"}}, "tool_choice.name: Field required (got missing)"),
    (MessagesRequest, {**CLAUDE, "thinking": {"type": "enabled", "budget_tokens": 5}},
     "thinking.budget_tokens: Input should be greater than or equal to 1024 (got 5)"),
    (MessagesRequest, {**CLAUDE, "messages": [{"role": "assistant", "content": "x"}]},
     "messages: the first message must have role 'user', got 'assistant'"),
    (ResponsesRequest, {**OPENAI, "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
     "input.0.content.0.text: Field required (got missing)"),
    (ResponsesRequest, {**OPENAI, "tools": [{"type": "web_search"}]}, "tools.0.type: tool type 'web_search' is a hosted"),
    (ResponsesRequest, {**OPENAI, "temperature": "hot"}, "temperature: Input should be a valid number"),
])
def test_messages_name_the_field(model, body, expected):
    assert _message(model, body).startswith(expected)
