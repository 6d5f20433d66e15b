"""Errors in the OpenAI shape: {"error": {"message", "type", "param", "code"}} with a real status."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("horizon.server")

_TYPES = {400: "invalid_request_error", 404: "not_found_error", 503: "overloaded_error", 500: "server_error"}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": _TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def _field_path(loc: tuple) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or "body"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            return APIError(400, f"malformed JSON body: {first.get('ctx', {}).get('error', 'cannot parse')}",
                            code="invalid_json").response()
        unknown = [_field_path(tuple(e.get("loc", ()))) for e in errors if e.get("type") == "extra_forbidden"]
        if unknown:
            return APIError(400, f"unknown field(s) {', '.join(unknown)}: not part of this API (check the "
                            "spelling)", param=unknown[0], code="unknown_field").response()
        param = _field_path(tuple(first.get("loc", ())))
        # A missing field's "input" is its parent object; an explicit null is shown as null.
        shown = "missing" if first.get("type") == "missing" else json.dumps(first.get("input"), default=str)[:120]
        message = f"{param}: {first.get('msg', 'invalid value')} (got {shown})"
        if len(errors) > 1:
            message += f"; and {len(errors) - 1} more problem(s)"
        return APIError(400, message, param=param, code="invalid_value").response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException):
        return APIError(exc.status_code, str(exc.detail), code="http_error").response()

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception):
        log.exception("unhandled server error")
        return APIError(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error").response()
