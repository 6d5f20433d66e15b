"""A conversation kept as token ids, so each prompt is an exact extension of the previous one.

Re-rendering the whole history every turn can change earlier tokens (dropped reasoning, stripped
whitespace, re-serialized JSON arguments; glm5-model.md §E.4), which throws away the prefix cache.
Here the ids only ever grow: prompt, then the generated ids verbatim (stop token included), then
only the newly rendered messages. `divergence()` says where a from-scratch render would differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from inference.chat.content_parts import ImagePartError
from inference.chat.messages import Message, ToolSpec
from inference.chat.parser import parse_completion
from inference.chat.special_tokens import ROLE_MARKERS
from inference.chat.template import ChatTemplate, coerce_messages, coerce_tools


@dataclass(frozen=True)
class Divergence:
    """Where the kept ids and a from-scratch render first differ."""

    position: int
    kept_len: int
    scratch_len: int
    kept_text: str  # a few tokens around the difference, decoded
    scratch_text: str

    def __str__(self) -> str:
        return (
            f"ids differ at position {self.position} (kept {self.kept_len} ids, scratch {self.scratch_len}): "
            f"kept ...{self.kept_text!r} vs scratch ...{self.scratch_text!r}"
        )


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing id, len of the shorter list if one is a prefix, None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class Conversation:
    """`images`: the model's image inputs (glm5_next/image_inputs.FlashImageInputs: `prepare(url,
    where)`, `expand(ids, prepared, base, where)`), or None for a text-only model, which refuses
    image parts naming them."""

    def __init__(
        self, tokenizer, template: ChatTemplate, tools: Iterable[ToolSpec | dict] | None = None,
        messages: Iterable[Message | dict] = (), images=None,
    ):
        self.tokenizer = tokenizer
        self.template = template
        self.tools = coerce_tools(tools)
        self.image_inputs = images
        self.messages: list[Message] = []
        self._ids: list[int] = []
        self._images: list = []  # engine PromptImages for the image spans in _ids, in order
        self._rendered = 0  # messages already covered by self._ids
        self._prompt_start: int | None = None  # where the pending generation prompt begins
        self._role_ids = {tokenizer.special_tokens[t] for t in ROLE_MARKERS if t in tokenizer.special_tokens}
        self.add(*messages)

    @property
    def ids(self) -> list[int]:
        return list(self._ids)

    def prompt_images(self) -> list:
        """The images whose placeholders are in the ids (PromptImages, in prompt order)."""
        return list(self._images)

    def fork(self) -> "Conversation":
        """An independent copy: adding to it leaves this one as it is (one stored reply, many follow-ups)."""
        clone = Conversation.__new__(Conversation)
        clone.__dict__.update(self.__dict__)
        clone.messages, clone._ids, clone._images = list(self.messages), list(self._ids), list(self._images)
        return clone

    def add(self, *messages: Message | dict) -> None:
        """Append messages (system, user, tool results, or a client-supplied assistant turn)."""
        new = coerce_messages(messages)
        if self._prompt_start is not None and new:
            # A generation prompt is pending but no reply came through add_generated: take it back.
            del self._ids[self._prompt_start :]
            self._prompt_start = None
        self.messages.extend(new)

    def prompt_ids(self) -> list[int]:
        """The ids to generate from: everything so far plus the new messages and the generation prompt."""
        if self._prompt_start is not None:
            return list(self._ids)
        pieces = self.template.render_pieces(self.messages)[self._rendered :]
        text = "".join(pieces) + self.template.generation_prompt()
        if not self._ids:
            text = self.template.render_prefix(self.tools) + text
        self._append_rendered(text, self.template.images_in_order(self.messages, self._rendered))
        self._rendered = len(self.messages)
        self._prompt_start = len(self._ids) - len(self.tokenizer.encode(self.template.generation_prompt()))
        return list(self._ids)

    def add_generated(self, ids: list[int], message: Message | None = None) -> Message:
        """Record the model's reply: its ids verbatim (stop token included) and the parsed message."""
        if self._prompt_start is None:
            raise ValueError("add_generated: call prompt_ids() before recording a reply")
        if message is None:
            text = self.tokenizer.decode(ids)
            parsed = parse_completion(text, self.tools or None, self.template.generation_starts_in_reasoning)
            message = parsed.to_message()
        if message.role != "assistant":
            raise ValueError(f"add_generated: message.role must be 'assistant', got {message.role!r}")
        self._ids.extend(ids)
        self.messages.append(message)
        self._rendered = len(self.messages)
        self._prompt_start = None
        return message

    def _append_rendered(self, text: str, images: list) -> None:
        new_ids = self.tokenizer.encode(text)
        # The reply's stop token is the next role marker (<|observation|>, <|user|>): it is already
        # in the ids, so the rendered segment must not repeat it.
        if self._ids and new_ids and new_ids[0] == self._ids[-1] and new_ids[0] in self._role_ids:
            new_ids = new_ids[1:]
        if images:
            new_ids, placed = self._expand(new_ids, images, len(self._ids))
            self._images.extend(placed)
        self._ids.extend(new_ids)

    def _expand(self, ids: list[int], images: list[tuple[int, Any]], base: int) -> tuple[list[int], list]:
        """Each image's single placeholder -> its image tokens (the processor's expansion)."""
        names = [part.name(i) for i, part in images]
        if self.image_inputs is None:
            raise ImagePartError(f"{names[0]}: this model reads text only; it cannot take image parts")
        prepared = [self.image_inputs.prepare(part.url, name) for (_, part), name in zip(images, names)]
        return self.image_inputs.expand(ids, prepared, base, where=names[0])

    # -- checking against a from-scratch render -------------------------------------------------

    def scratch_ids(self) -> list[int]:
        pending = self._prompt_start is not None
        text = self.template.render(self.messages, self.tools, add_generation_prompt=pending)
        ids = self.tokenizer.encode(text)
        images = self.template.images_in_order(self.messages)
        return self._expand(ids, images, 0)[0] if images else ids

    def divergence(self, context: int = 4) -> Divergence | None:
        """None when the kept ids equal a from-scratch render of the same messages."""
        kept, scratch = self._ids, self.scratch_ids()
        if self._prompt_start is None and kept and kept[-1] in self._role_ids:
            # After a reply the kept ids end with its stop token, which the next render begins with.
            scratch_cmp = scratch + [kept[-1]] if scratch[-1:] != kept[-1:] else scratch
        else:
            scratch_cmp = scratch
        pos = first_difference(kept, scratch_cmp)
        if pos is None:
            return None
        lo = max(0, pos - context)
        return Divergence(
            position=pos, kept_len=len(kept), scratch_len=len(scratch_cmp),
            kept_text=self.tokenizer.decode(kept[lo : pos + context]),
            scratch_text=self.tokenizer.decode(scratch_cmp[lo : pos + context]),
        )
