"""The GLM-5.x special tokens in vocabulary order (glm5-model.md §E.1, §F).

In the real tokenizer they start at id 154820; the project's small test tokenizer appends them to
its own byte-level BPE vocabulary in the same order.
"""

from __future__ import annotations

SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>",
    "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
    "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>", "<|end_of_video|>",
    "<|begin_of_audio|>", "<|end_of_audio|>", "<|begin_of_transcription|>", "<|end_of_transcription|>",
    "<|code_prefix|>", "<|code_middle|>", "<|code_suffix|>",
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
    "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
    "/nothink", "<|begin_of_box|>", "<|end_of_box|>", "<|image|>", "<|video|>",
)

# A reply ends by emitting the next role marker (or end of text); the engine keeps it in the sequence.
STOP_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|user|>", "<|observation|>")

ROLE_MARKERS: tuple[str, ...] = ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
