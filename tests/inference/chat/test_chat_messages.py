from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from inference.chat.messages import Message, ToolCall, ToolSpec


def test_chat_modules_do_not_import_torch():
    code = ("import sys, inference.chat, inference.chat.conversation, inference.chat.parser, inference.tokenizer, "
            "inference.tokenizer_training; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_openai_shapes_round_trip():
    spec = ToolSpec.from_openai({"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}})
    assert ToolSpec.from_openai(spec.to_openai()) == spec == ToolSpec.from_openai(spec.function_dict())
    call = ToolCall.from_openai({"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"a": [1]}'}})
    assert call.arguments == {"a": [1]} and ToolCall.from_openai(call.to_openai()) == call
    msg = Message.assistant("x", reasoning="r", tool_calls=[call])
    assert Message.model_validate(msg.to_openai()) == msg


@pytest.mark.parametrize("data, fragment", [
    ({"role": "user", "content": [{"type": "image_url", "image_url": {}}]}, r"content\[0\]: image_url.url missing"),
    ({"role": "user", "content": ["x", {"type": "input_audio", "input_audio": {}}]}, r"content\[1\]: expected a text or"),
    ({"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}, "only user and tool"),
    ({"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}]}, "arguments"),
    ({"role": "user", "tool_calls": [{"id": "c", "name": "f", "arguments": {}}]}, "only assistant messages"),
    ({"role": "robot", "content": "x"}, "role"),
])
def test_bad_messages_name_the_problem(data, fragment):
    with pytest.raises(ValidationError, match=fragment):
        Message.model_validate(data)


def test_tool_spec_rejects_non_function_tools():
    with pytest.raises(ValueError, match="tools\\[\\].type"):
        ToolSpec.from_openai({"type": "retrieval", "function": {"name": "x"}})
