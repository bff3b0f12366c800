"""The OpenAPI document says what the server really answers: errors are 400 (not FastAPI's 422) in
OpenAI's shape, and every route lists the error statuses it can return."""

from __future__ import annotations

from fastapi import FastAPI

from app.errors import ErrorResponse

_WHY = {
    400: "Invalid request (code `invalid_request`, `unsupported_parameter`, `context_length_exceeded`, ...)",
    401: "Missing or wrong API key (code `invalid_api_key`), when the server has one",
    403: "A foreign Origin, or a Host that is not this machine on a loopback bind (code `origin_not_allowed`, "
         "`host_not_allowed`)",
    404: "Unknown model or document (code `model_not_found`, `document_not_found`)",
    413: "Request body too large (code `request_too_large`, `file_too_large`)",
    429: "Too many requests already wait for the accelerator or for an ingest (code `overloaded`, with Retry-After)",
    503: "Models loading or unavailable, or the wait for the accelerator timed out (with Retry-After)",
}


def errors_doc(*statuses: int) -> dict:
    """`responses=` entries for a route's error statuses, each with the OpenAI-shaped error body."""
    return {status: {"model": ErrorResponse, "description": _WHY[status]} for status in statuses}


def document(app: FastAPI) -> None:
    """Replace FastAPI's 422 validation responses by the 400 the error handler really sends."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = build()  # cached by FastAPI: edited once, in place
            for operations in schema["paths"].values():
                for op in operations.values():
                    if op.get("responses", {}).pop("422", None) is not None:
                        op["responses"].setdefault("400", {
                            "description": _WHY[400],
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}})
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
        return app.openapi_schema

    app.openapi = openapi
