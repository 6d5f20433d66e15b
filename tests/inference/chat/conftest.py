from __future__ import annotations

import pytest

from inference.chat.messages import Message, ToolCall, ToolSpec
from inference.tokenizer import Tokenizer
from inference.tokenizer_training import write_tokenizer_files


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tokenizer")
    write_tokenizer_files(out, variant="glm-5.2")
    return out


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir) -> Tokenizer:
    return Tokenizer.from_pretrained(tokenizer_dir)


BASH = ToolSpec(
    name="bash",
    description="Run a shell command",
    parameters={"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
                "required": ["command"]},
)
EDIT = ToolSpec(
    name="edit",
    description="Edit a file — exact replacement",
    parameters={"type": "object", "properties": {"path": {"type": "string"}, "changes": {"type": "array"},
                                                  "dry_run": {"type": "boolean"}, "opts": {"type": "object"}}},
)
TOOLS = [BASH, EDIT]


def sample_conversation() -> list[Message]:
    """A history with everything the templates treat specially."""
    return [
        Message.system("You are a careful coding agent."),
        Message.user("Fix the failing test."),
        Message.assistant(
            " I will look first. ", reasoning="\nNeed to see the files.\n",
            tool_calls=[
                ToolCall(id="c1", name="bash", arguments={"command": "ls -la", "timeout": 30}),
                ToolCall(id="c2", name="edit", arguments={"path": "ä.py", "changes": [{"a": 1}], "dry_run": True, "opts": {}}),
            ],
        ),
        Message.tool("edit ok", tool_call_id="c2"),
        Message.tool("a.py\nb.py", tool_call_id="c1"),
        Message.assistant("Fixed it.", reasoning="Both done."),
        Message.user("Thanks! Now run the tests."),
        Message.assistant("<think>inline reasoning</think>Running them now."),
        Message.user("ok"),
    ]
