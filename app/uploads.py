"""Uploaded files: read within the size limit, given a safe name, staged, and kept in the KB's uploads
folder only when their ingest succeeds (a failed re-upload puts the previous file back)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import unicodedata
import uuid
from collections.abc import Callable
from pathlib import Path

from fastapi import Request, UploadFile
from starlette.exceptions import HTTPException

from app.body_limit import capped, declared_over
from app.errors import APIError
from knowledge import IngestReport, KnowledgeBase

UPLOADS = "uploads"
STAGING = ".staging"  # inside UPLOADS; dot folders are never ingested, and it is emptied at start-up
ALLOWED = {".md", ".markdown", ".txt", ".html", ".htm", ".json", ".jsonl", ".csv", ".pdf"}
NAME_BYTES = 143  # the shortest NAME_MAX in use (eCryptfs); ext4 allows 255
MAX_FILES = 100  # per request
MULTIPART_OVERHEAD = 64 * 1024  # boundaries and part headers on top of the files' bytes
_SAFE = re.compile(r"^[\w\u00C0-\uFFFF][\w\u00C0-\uFFFF .()+-]*$")


class _BodyTooLarge(Exception):
    pass


def too_large(limit: int) -> APIError:
    return APIError(413, f"the upload is larger than the {limit} byte limit", "file_too_large", param="file")


def safe_name(filename: str | None) -> str:
    """A plain file name (no directories, no dot-files) of at most NAME_BYTES in UTF-8, or a 400:
    uploads never escape the KB folder. A longer name is cut at a character, keeping its suffix, and
    ends in a short hash of the whole name, so two long names that share their start stay two files."""
    name = unicodedata.normalize("NFC", (filename or "").strip())
    if not name or "/" in name or "\\" in name or name in (".", "..") or not _SAFE.match(name):
        raise APIError(400, f"invalid file name {filename!r}: use letters, digits, spaces and . _ - ( ) +",
                       "invalid_filename", param="file")
    if len(name.encode()) <= NAME_BYTES:
        return name
    suffix = Path(name).suffix
    tag = "~" + hashlib.sha256(name.encode()).hexdigest()[:8]
    room = NAME_BYTES - len(suffix.encode()) - len(tag)
    return Path(name).stem.encode()[:room].decode(errors="ignore").rstrip() + tag + suffix


def unsupported(name: str) -> str | None:
    """Why a file of this name is not ingested, or None when its type is one the loaders read."""
    suffix = Path(name).suffix
    if suffix.lower() in ALLOWED:
        return None
    return f"unsupported file type {suffix or '(none)'}; allowed: {', '.join(sorted(ALLOWED))}"


async def read_form_files(request: Request, limit: int) -> list[UploadFile]:
    """The `files` parts of a multipart body, refused with a 413 by its Content-Length or as soon as
    the stream passes the limit: the parser spools parts to disk, so the limit must act first."""
    cap = limit + MULTIPART_OVERHEAD
    if declared_over(request.headers, cap):
        raise too_large(limit)
    try:
        form = await Request(request.scope, capped(request.receive, cap, _BodyTooLarge)).form(max_files=MAX_FILES)
    except _BodyTooLarge:
        raise too_large(limit) from None
    except HTTPException as e:  # what Starlette makes of a malformed body
        raise APIError(400, f"malformed form body: {e.detail}", "invalid_request") from None
    files = [v for k, v in form.multi_items() if k == "files" and not isinstance(v, str)]
    if not files:
        await form.close()
        raise APIError(400, "no files: send multipart/form-data with one or more `files` parts", "invalid_request",
                       param="files")
    return files


def staging_dir(kb_dir: Path) -> Path:
    return kb_dir / UPLOADS / STAGING


def clear_staging(kb_dir: Path) -> None:
    """Files staged by a server that stopped before ingesting them."""
    shutil.rmtree(staging_dir(kb_dir), ignore_errors=True)


async def stage(upload: UploadFile, kb_dir: Path, limit: int) -> Path:
    """Copy one upload to a temp file in the staging folder, enforcing the per-file limit."""
    folder = staging_dir(kb_dir)
    folder.mkdir(parents=True, exist_ok=True)
    staged = folder / uuid.uuid4().hex
    size = 0
    try:
        with open(staged, "wb") as out:
            while block := await upload.read(1 << 16):
                size += len(block)
                if size > limit:
                    raise too_large(limit)
                out.write(block)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return staged


def ingest_staged(kb: KnowledgeBase, staged: Path, name: str,
                  checkpoint: Callable[[], None] | None = None) -> IngestReport:
    """Move a staged file to uploads/<name> for its ingest (a document's source is its final path) and
    keep it only if the ingest succeeds; otherwise the previous file of that name, set aside in the
    staging folder meanwhile, is put back. Runs on the KB's writer thread, so nothing else writes there."""
    target = kb.dir / UPLOADS / name
    previous = staged.with_name(staged.name + ".previous")
    had_previous = target.exists()
    if had_previous:
        os.replace(target, previous)
    os.replace(staged, target)
    report = None
    try:
        report = kb.ingest([target], progress=False, prune=False, checkpoint=checkpoint)
        return report
    finally:
        if report is not None and report.ok and not report.empty:
            previous.unlink(missing_ok=True)
        elif had_previous:
            os.replace(previous, target)
        else:
            target.unlink(missing_ok=True)


def remove_upload(kb: KnowledgeBase, source: str) -> None:
    """Delete the file of a deleted document when it is one of the KB's own uploads."""
    path = Path(source)
    if path.parent == (kb.dir / UPLOADS).resolve():
        path.unlink(missing_ok=True)
