"""GLM-5.x chat format: messages, templates, token-exact conversations, the output parser.

Nothing in this package imports torch.
"""

from inference.chat.messages import Message, ToolCall, ToolSpec
from inference.chat.template import ChatTemplate
from inference.chat.variants import normalize_reasoning_effort

__all__ = ["ChatTemplate", "Message", "ToolCall", "ToolSpec", "normalize_reasoning_effort"]
