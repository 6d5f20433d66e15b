"""Images in chat messages, kept beside the text in the order the client sent them.

`Message.content` stays the message's text (what every text consumer reads: the agent's context
accounting, summaries, the parser); its images are `ImagePart`s that remember where in the text
they sat (`at`, a character offset) and which content part they were (`index`), so a template puts
each image's placeholder back in place and an error names the part (`messages[2].content[1]`).
Wire shapes: OpenAI chat `{"type": "image_url", "image_url": {"url": ..., "detail": ...}}` here;
the Anthropic and Responses routes build ImageParts from their own blocks. Nothing is decoded here
(no torch, no Pillow): the model's image inputs (glm5_next/image_inputs.py) decode the URL.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

# What the GLM-V / GLM-5.3-Flash chat templates write for one image; the processor then repeats
# <|image|> once per image token.
IMAGE_PLACEHOLDER = "<|begin_of_image|><|image|><|end_of_image|>"


class ImagePartError(ValueError):
    """An image part that cannot be used; the message starts with the part's name."""

    @property
    def where(self) -> str:
        return str(self).partition(": ")[0]


class ImagePart(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=1)  # a data: URL (remote URLs are refused when decoded)
    at: int = Field(default=0, ge=0)  # character offset in the message's text
    index: int = Field(default=0, ge=0)  # position in the client's content list
    where: Optional[str] = None  # the client's name for the part, when not messages[i].content[j]

    def name(self, message_index: int) -> str:
        return self.where or f"messages[{message_index}].content[{self.index}]"


def split_content(parts: list[Any]) -> tuple[str, list[ImagePart]]:
    """An OpenAI content list -> (its text, its images at their offsets in that text)."""
    texts: list[str] = []
    images: list[ImagePart] = []
    length = 0
    for i, part in enumerate(parts):
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            part = part["text"]
        if isinstance(part, str):
            texts.append(part)
            length += len(part)
        elif isinstance(part, dict) and part.get("type") == "image_url":
            ref = part.get("image_url")
            url = ref.get("url") if isinstance(ref, dict) else ref
            if not isinstance(url, str) or not url:
                raise ValueError(f"content[{i}]: image_url.url missing (expected a data:image/...;base64, URL)")
            images.append(ImagePart(url=url, at=length, index=i))
        else:
            raise ValueError(f"content[{i}]: expected a text or image_url part, got {part!r:.80}")
    return "".join(texts), images


def with_placeholders(text: str, images: list[ImagePart] | None) -> str:
    """The text with each image's placeholder at its offset (what the template renders)."""
    if not images:
        return text
    out, prev = [], 0
    for image in images:
        out += [text[prev:image.at], IMAGE_PLACEHOLDER]
        prev = image.at
    return "".join(out) + text[prev:]


def openai_image(part: ImagePart) -> dict:
    return {"type": "image_url", "image_url": {"url": part.url}}


def wire_parts(text: str, images: list[ImagePart], image_item=openai_image) -> list[dict]:
    """Text + images -> a content list in their order (OpenAI parts by default)."""
    out, prev = [], 0
    for image in images:
        if text[prev:image.at]:
            out.append({"type": "text", "text": text[prev:image.at]})
        out.append(image_item(image))
        prev = image.at
    if text[prev:]:
        out.append({"type": "text", "text": text[prev:]})
    return out
