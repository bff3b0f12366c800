"""GET /: the built-in chat page (one static file, no CDN, works offline)."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter()


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index():
    return resources.files("app").joinpath("static/index.html").read_text(encoding="utf-8")
