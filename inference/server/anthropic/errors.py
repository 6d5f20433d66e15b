"""Errors in Anthropic's shape, `{"type": "error", "error": {"type", "message"}, "request_id"}`, with
its status codes (overload is 529), for every failure of an Anthropic route: bad JSON, validation,
refusals from the shared chat code, and unexpected exceptions.

The app's exception handlers answer in OpenAI's shape; the route class catches first, so Anthropic
clients (whose SDKs read `error.type`) get the shape they parse.
"""

from __future__ import annotations

import json
import uuid

from fastapi.responses import JSONResponse

from inference.server.errors import APIError
from inference.server.validation import shaped_route

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


AnthropicRoute = shaped_route(error_response)
