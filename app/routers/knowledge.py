"""Knowledge-base endpoints: upload + ingest documents, list, delete, search."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import asdict
from pathlib import Path

from fastapi import APIRouter, Depends, UploadFile
from fastapi.concurrency import run_in_threadpool

from app.deps import Ready, check_api_key
from app.errors import APIError
from app.schemas import SearchRequest
from knowledge import UnknownDocumentError

router = APIRouter(prefix="/v1/knowledge", dependencies=[Depends(check_api_key)])

UPLOADS = "uploads"
ALLOWED = {".md", ".markdown", ".txt", ".html", ".htm", ".json", ".jsonl", ".csv", ".pdf"}
_SAFE = re.compile(r"^[\w\u00C0-\uFFFF][\w\u00C0-\uFFFF .()+-]{0,200}$")


def safe_name(filename: str | None) -> str:
    """A plain file name (no directories, no dot-files) or a 400: uploads never escape the KB folder."""
    name = (filename or "").strip()
    if not name or "/" in name or "\\" in name or name in (".", "..") or not _SAFE.match(name):
        raise APIError(400, f"invalid file name {filename!r}: use letters, digits, spaces and . _ - ( ) +",
                       "invalid_filename", param="file")
    if Path(name).suffix.lower() not in ALLOWED:
        raise APIError(415, f"unsupported file type {Path(name).suffix or '(none)'}; allowed: "
                            f"{', '.join(sorted(ALLOWED))}", "unsupported_file_type", param="file")
    return name


async def _save(upload: UploadFile, target: Path, limit: int) -> None:
    """Stream to a temp file beside the target, enforcing the size limit, then rename into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".upload-")
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            while block := await upload.read(1 << 16):
                size += len(block)
                if size > limit:
                    raise APIError(413, f"{upload.filename} is larger than the {limit} byte upload limit",
                                   "file_too_large", param="file")
                out.write(block)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _report(report) -> dict:
    out = {name: getattr(report, name) for name in ("added", "updated", "unchanged", "deleted")}
    out["failed"] = [{"file": Path(path).name, "reason": reason} for path, reason in report.failed]
    return out | {"chunks": report.chunks}


@router.post("/documents")
async def upload_documents(files: list[UploadFile], state: Ready):
    names = [safe_name(f.filename) for f in files]  # validate all before writing any
    upload_dir = Path(state.kb.dir) / UPLOADS
    paths = []
    for upload, name in zip(files, names):
        target = upload_dir / name
        await _save(upload, target, state.settings.max_upload_bytes)
        paths.append(target)

    return _report(await run_in_threadpool(state.kb.ingest, paths, progress=False, prune=False))


@router.get("/documents")
async def list_documents(state: Ready):
    docs = await run_in_threadpool(state.kb.list_documents)
    return {"object": "list", "data": [asdict(d) for d in docs]}


@router.delete("/documents")
async def delete_document(source: str, state: Ready):
    """Delete by path, by name in the KB (e.g. `uploads/notes.md`) or by folder."""
    try:
        docs = await run_in_threadpool(state.kb.delete, source)
    except UnknownDocumentError as e:
        raise APIError(404, str(e), "document_not_found", param="source") from None
    return {"deleted": [d.name for d in docs]}


@router.post("/search")
async def search(req: SearchRequest, state: Ready):
    hits = await run_in_threadpool(state.kb.search, req.query, k=req.k, mode=req.mode, min_score=req.min_score)
    return {"object": "list", "data": [
        {"text": h.text, "source": h.name, "heading": h.heading, "entry_id": h.entry_id, "score": h.score}
        for h in hits]}
