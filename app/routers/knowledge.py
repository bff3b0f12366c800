"""Knowledge-base endpoints: upload (an ingest job), follow the job, list, delete, search."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from app.deps import Ready, check_api_key
from app.errors import APIError
from app.jobs import FileFailure, IngestJob
from app.schemas import SearchRequest
from app.state import AppState
from app.uploads import ALLOWED, MAX_FILES, read_form_files, remove_upload, safe_name, stage, unsupported
from knowledge import DocumentRecord, KnowledgeBase

router = APIRouter(prefix="/v1/knowledge", dependencies=[Depends(check_api_key)])


class DocumentRef(BaseModel):
    id: int
    source: str
    name: str


class Deleted(BaseModel):
    deleted: list[DocumentRef]


# the handler reads the multipart body itself (within the size limit), so its shape is declared here
_UPLOAD_BODY = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["files"],
    "properties": {"files": {"type": "array", "minItems": 1, "maxItems": MAX_FILES,
                             "items": {"type": "string", "format": "binary"},
                             "description": "The files to ingest, each named with one of: "
                                            + ", ".join(sorted(ALLOWED))}},
}}}}}


@router.post("/documents", status_code=202, openapi_extra=_UPLOAD_BODY)
async def upload_documents(request: Request, state: Ready, response: Response) -> IngestJob:
    """Stage the files, answer 202 with an ingest job at once; GET /v1/knowledge/jobs/{id} follows it."""
    limit = state.settings.max_upload_bytes
    files = await read_form_files(request, limit)
    staged: list[tuple[Path, str]] = []
    try:
        names = [safe_name(f.filename) for f in files]  # validate all before writing any
        # a file of a type no loader reads, or a second file of one name, fails alone in the job, like a
        # file that fails to parse
        refused: list[FileFailure] = []
        for i, (upload, name) in enumerate(zip(files, names)):
            if why := unsupported(name) or (name in names[:i] and "another file of this upload has this name"):
                refused.append(FileFailure(file=name, reason=why))
            else:
                staged.append((await stage(upload, state.kb.dir, limit), name))
        job = state.writer.submit_ingest(state.kb, staged, refused)
    except BaseException:
        for path, _ in staged:
            path.unlink(missing_ok=True)
        raise
    finally:
        for f in files:
            await f.close()
    response.headers["Location"] = f"/v1/knowledge/jobs/{job.id}"
    return job


@router.get("/jobs/{job_id}")
async def get_job(job_id: str, state: Ready) -> IngestJob:
    job = state.writer.get(job_id)
    if job is None:
        raise APIError(404, f"no ingest job {job_id!r} (finished jobs are kept for a while only)", "job_not_found",
                       param="job_id")
    return job


@router.get("/documents")
async def list_documents(state: Ready):
    docs = await run_in_threadpool(state.kb.list_documents)
    return {"object": "list", "data": [asdict(d) for d in docs]}


def _exact_document(docs: list[DocumentRecord], source: str | None, doc_id: int | None) -> DocumentRecord:
    """The one document named by id or exact source; anything that could match several is a 400."""
    if (source is None) == (doc_id is None):
        raise APIError(400, "give exactly one of `id` and `source`", "invalid_request")
    if doc_id is not None:
        found = [d for d in docs if d.id == doc_id]
        if not found:
            raise APIError(404, f"no document with id {doc_id}", "document_not_found", param="id")
        return found[0]
    if "\x00" in source or not source.strip("/ ") or source.endswith("/"):
        raise APIError(400, f"invalid source {source!r}: give a document's exact source or its id",
                       "invalid_source", param="source")
    found = [d for d in docs if d.source == source]
    if found:
        return found[0]
    if under := sum(d.source.startswith(source) for d in docs):
        raise APIError(400, f"{source!r} is not a document but a prefix of {under}: the API deletes one "
                            "document at a time, by exact source or id", "invalid_source", param="source")
    raise APIError(404, f"no document with source {source!r} (see GET /v1/knowledge/documents)",
                   "document_not_found", param="source")


def _delete(kb: KnowledgeBase, source: str | None, doc_id: int | None) -> DocumentRecord:
    doc = _exact_document(kb.list_documents(), source, doc_id)
    # an exact source matches only itself; one deleted meanwhile (by the CLI) raises UnknownDocumentError,
    # a 404 by app/errors.py's table
    kb.delete(doc.source)
    remove_upload(kb, doc.source)
    return doc


# the query form also takes `?id=N`, its spelling from before the id in the path; the document lists
# `source` alone, as required, since a request with neither is refused
_SOURCE_PARAM = {"parameters": [{
    "name": "source", "in": "query", "required": True,
    "description": "A document's exact source as GET /v1/knowledge/documents lists it (not a folder or prefix)",
    "schema": {"type": "string", "pattern": r"^[^\u0000]*[^/\s\u0000]$"}}]}


@router.delete("/documents", openapi_extra=_SOURCE_PARAM)
async def delete_document(request: Request, state: Ready) -> Deleted:
    """Delete one document by its exact source as listed; an upload's file goes too."""
    query = request.query_params
    doc_id = query.get("id")
    if doc_id is not None and not doc_id.lstrip("-").isdigit():
        raise APIError(400, f"id: not an integer: {doc_id!r}", "invalid_request", param="id")
    return await _deleted(state, query.get("source"), None if doc_id is None else int(doc_id))


@router.delete("/documents/{doc_id}")
async def delete_document_by_id(doc_id: int, state: Ready) -> Deleted:
    """Delete one document by its id; an upload's file goes too."""
    return await _deleted(state, None, doc_id)


async def _deleted(state: AppState, source: str | None, doc_id: int | None) -> Deleted:
    doc = await state.writer.run(_delete, state.kb, source, doc_id)
    return Deleted(deleted=[DocumentRef(id=doc.id, source=doc.source, name=doc.name)])


@router.post("/search")
async def search(req: SearchRequest, state: Ready):
    hits = await run_in_threadpool(state.kb.search, req.query, k=req.k, mode=req.mode, min_score=req.min_score)
    return {"object": "list", "data": [
        {"text": h.text, "source": h.name, "heading": h.heading, "entry_id": h.entry_id, "score": h.score,
         "score_kind": h.score_kind, "scores": h.scores}
        for h in hits]}
