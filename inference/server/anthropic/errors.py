"""Errors in Anthropic's shape, `{"type": "error", "error": {"type", "message"}, "request_id"}`, with
its status codes (overload is 529), for every failure of an Anthropic route: bad JSON, validation,
refusals from the shared chat code, and unexpected exceptions.

The app's exception handlers answer in OpenAI's shape; this route class catches first, so
Anthropic clients (whose SDKs read `error.type`) get the shape they parse.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Callable

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from inference.server.errors import APIError

log = logging.getLogger("horizon.server")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
          529: "overloaded_error"}


def status_of(exc: APIError) -> int:
    return 529 if exc.status == 503 else exc.status


def error_body(exc: APIError) -> dict:
    status = status_of(exc)
    kind = _TYPES.get(status, "invalid_request_error" if 400 <= status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": exc.message},
            "request_id": "req_" + uuid.uuid4().hex[:24]}


def error_response(exc: APIError) -> JSONResponse:
    return JSONResponse(error_body(exc), status_code=status_of(exc))


def error_event(exc: APIError) -> str:
    """The in-band form once a stream has started."""
    return f"event: error\ndata: {json.dumps(error_body(exc), ensure_ascii=False)}\n\n"


def validation_error(exc: RequestValidationError) -> APIError:
    errors = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        return APIError(400, f"malformed JSON body: {first.get('ctx', {}).get('error', 'cannot parse')}")
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    # Discriminated unions put the block type in the path ("messages.0.content.list[...].text"): drop it.
    field = ".".join(p for p in loc if not p.startswith(("list[", "str", "function-"))) or "body"
    text = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if field == "body":  # a rule across fields: its message names them
        message = text
    else:
        shown = json.dumps(first.get("input"), default=str)[:120] if "input" in first else "missing"
        message = f"{field}: {text} (got {shown})"
    if len(errors) > 1:
        message += f"; and {len(errors) - 1} more problem(s)"
    return APIError(400, message, param=field)


class AnthropicRoute(APIRoute):
    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def anthropic_shaped(request: Request):
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return error_response(validation_error(exc))
            except APIError as exc:
                return error_response(exc)
            except Exception as exc:
                log.exception("unhandled error in an Anthropic route")
                return error_response(APIError(500, f"internal error: {type(exc).__name__}: {exc}"))

        return anthropic_shaped
