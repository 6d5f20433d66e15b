"""Readable 400s for request bodies with unions of content blocks and items, and a route class that
renders every failure of a route in one API's error shape.

Pydantic reports a bad block once per union branch ("not a string", then the block's real problem)
and puts branch labels and discriminator tags in the path. The message here names the deepest
problem, with a path of the client's own keys and indexes: `messages.0.content.0.text: Field
required (got missing)`.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from inference.server.errors import APIError

log = logging.getLogger("horizon.server")

_BRANCH_LABELS = ("list[", "tagged-union[", "function-", "union[", "dict[", "literal[")
_SCALARS = {"str", "int", "float", "bool", "dict", "list", "none"}


def client_path(body: Any, loc: tuple) -> list[str]:
    """The error's location in the client's own keys and indexes (branch labels and tags left out)."""
    parts, value, tag_seen = [], body, False
    for k, p in enumerate(loc):
        following = loc[k + 1] if k + 1 < len(loc) else None
        if p == "body" and k == 0:
            continue
        if isinstance(p, int) and isinstance(value, list) and 0 <= p < len(value):
            parts.append(str(p))
            value, tag_seen = value[p], False
        elif isinstance(p, str) and isinstance(value, dict) and p in value:
            parts.append(p)
            value, tag_seen = value[p], False
        elif isinstance(p, str) and (p.startswith(_BRANCH_LABELS) or p in _SCALARS):
            continue  # a union branch label
        elif isinstance(value, dict) and ((value.get("type") == p and not tag_seen) or (
                following is not None and isinstance(following, str) and following in value)):
            tag_seen = True  # a discriminator tag (or a default-typed item's), not a key the client wrote
        else:
            parts.append(str(p))
            value = None
    return parts


def request_error(exc: RequestValidationError) -> APIError:
    errors = exc.errors()
    if errors and errors[0].get("type") == "json_invalid":
        return APIError(400, f"malformed JSON body: {errors[0].get('ctx', {}).get('error', 'cannot parse')}",
                        code="invalid_json")
    body = getattr(exc, "body", None)
    scored = [(client_path(body, tuple(e.get("loc", ()))), i, e) for i, e in enumerate(errors)]
    # Our own validators explain the problem best; otherwise the deepest location is the real one.
    parts, _, first = max(scored, key=lambda s: (s[2].get("type") == "value_error", len(s[0]), -s[1])) \
        if scored else ([], 0, {})
    field = ".".join(parts) or "body"
    text = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if field == "body" and first.get("type") == "value_error":  # a rule across fields: its message names them
        message = text
    else:
        shown = "missing" if first.get("type") == "missing" else json.dumps(first.get("input"), default=str)[:120]
        message = f"{field}: {text} (got {shown})"
    # Union branches report the same problem at shallower paths: count only problems elsewhere.
    others = len({tuple(p) for p, _, _ in scored if tuple(p) != tuple(parts[: len(p)])})
    if others:
        message += f"; and {others} more problem(s)"
    return APIError(400, message, param=field, code="invalid_value")


def shaped_route(render: Callable[[APIError], Any]) -> type[APIRoute]:
    """An APIRoute whose failures (validation, APIError, anything unexpected) are `render`ed."""

    class ShapedRoute(APIRoute):
        def get_route_handler(self) -> Callable:
            handler = super().get_route_handler()

            async def shaped(request: Request):
                try:
                    return await handler(request)
                except RequestValidationError as exc:
                    return render(request_error(exc))
                except APIError as exc:
                    return render(exc)
                except Exception as exc:
                    log.exception("unhandled error in %s", self.path)
                    return render(APIError(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error"))

            return shaped

    return ShapedRoute
