"""The knowledge-base API against a real server on the tiny models: uploads are ingest jobs that keep
the good file when they fail, deletes name one document, foreign web pages are refused, the size
limit acts before the body reaches the disk, and an ingest never stalls /health."""

from __future__ import annotations

import hashlib
import socket
import sqlite3
import time

import httpx
import pytest

from tests.api_server import Server

NOTES_V1 = b"# Wipers\n\nService mode lifts the wiper arms off the glass.\n"
BINARY = b"\x00\x01\x02 not text"


@pytest.fixture(scope="module")
def srv(tiny_builds, tmp_path_factory):
    root = tmp_path_factory.mktemp("kb_api")
    server = Server(tiny_builds["llama"], tiny_builds["bert"], root / "kb", root / "server.log")
    server.kb = root / "kb"
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def upload(srv: Server, *files: tuple[str, bytes], **headers: str) -> httpx.Response:
    parts = [("files", (name, data, "application/octet-stream")) for name, data in files]
    return httpx.post(srv.url + "/v1/knowledge/documents", files=parts, headers=headers, timeout=60)


def ingest(srv: Server, *files: tuple[str, bytes]) -> dict:
    r = upload(srv, *files)
    assert r.status_code == 202, r.text
    assert r.headers["location"] == f"/v1/knowledge/jobs/{r.json()['id']}"
    return srv.wait_job(r.json())


def rows(srv: Server) -> dict[str, str]:
    """source -> content sha256, read from the KB's SQLite file directly."""
    with sqlite3.connect(srv.kb / "kb.sqlite") as db:
        return dict(db.execute("SELECT source, content_hash FROM documents"))


def uploads_on_disk(srv: Server) -> list[str]:
    return sorted(p.relative_to(srv.kb / "uploads").as_posix() for p in (srv.kb / "uploads").rglob("*")
                  if p.is_file())


def delete(srv: Server, headers: dict | None = None, **params) -> httpx.Response:
    return httpx.request("DELETE", srv.url + "/v1/knowledge/documents", params=params, headers=headers, timeout=60)


def test_failed_reupload_keeps_the_good_file(srv):
    job = ingest(srv, ("notes.md", NOTES_V1))
    assert job["status"] == "succeeded" and job["error"] is None, job
    source = str((srv.kb / "uploads" / "notes.md").resolve())
    assert job["added"] == [source] and rows(srv)[source] == hashlib.sha256(NOTES_V1).hexdigest()

    job = ingest(srv, ("notes.md", BINARY))
    assert job["status"] == "failed" and job["error"]["code"] == "ingest_failed", job
    assert [f["file"] for f in job["failed"]] == ["notes.md"]
    assert (srv.kb / "uploads" / "notes.md").read_bytes() == NOTES_V1
    assert rows(srv)[source] == hashlib.sha256(NOTES_V1).hexdigest()

    job = ingest(srv, ("broken.md", BINARY))  # a failed new upload leaves nothing behind
    assert job["status"] == "failed"
    assert uploads_on_disk(srv) == ["notes.md"] and str(srv.kb / "uploads" / "broken.md") not in rows(srv)


def test_long_names_are_cut_to_a_safe_length_and_stay_apart(srv):
    job = ingest(srv, ("€" * 87 + ".md", NOTES_V1))  # 264 bytes: longer than any file system allows
    assert job["status"] == "succeeded", job
    (name,) = job["files"]
    assert name.endswith(".md") and len(name.encode()) <= 143 and name.startswith("€" * 40)
    assert (srv.kb / "uploads" / name).read_bytes() == NOTES_V1
    # a second long name with the same start is another file, not a new version of the first
    other = b"# Mirrors\n\nThe mirrors fold in when the car locks.\n"
    job = ingest(srv, ("€" * 88 + ".md", other))
    (other_name,) = job["files"]
    assert job["added"] and not job["updated"] and other_name != name and len(other_name.encode()) <= 143
    assert (srv.kb / "uploads" / name).read_bytes() == NOTES_V1
    assert (srv.kb / "uploads" / other_name).read_bytes() == other
    # the same long name again is the same document
    assert ingest(srv, ("€" * 87 + ".md", NOTES_V1))["unchanged"]


@pytest.mark.parametrize("bad", [0, 1, 2])
def test_each_file_of_an_upload_ends_on_its_own(srv, bad):
    """A file of a type no loader reads, first, middle or last, fails alone; the others are ingested."""
    files = [(f"part{bad}-{i}.md", f"# Part {i}\n\nNote {i} of upload {bad}.\n".encode()) for i in range(3)]
    files[bad] = (f"tool{bad}.exe", b"MZ\x90\x00")
    job = ingest(srv, *files)
    assert job["status"] == "failed" and job["error"]["code"] == "ingest_failed", job
    assert sorted(job["files"]) == sorted(name for name, _ in files)
    assert [f["file"] for f in job["failed"]] == [f"tool{bad}.exe"]
    assert "unsupported file type" in job["failed"][0]["reason"]
    assert len(job["added"]) == 2 and f"tool{bad}.exe" not in uploads_on_disk(srv)


def test_a_second_file_of_the_same_name_fails_alone(srv):
    job = ingest(srv, ("twin.md", NOTES_V1), ("twin.md", b"# Other\n\nOther text.\n"))
    assert [f["file"] for f in job["failed"]] == ["twin.md"] and "has this name" in job["failed"][0]["reason"]
    assert (srv.kb / "uploads" / "twin.md").read_bytes() == NOTES_V1


@pytest.mark.parametrize("source,status,code", [
    ("", 400, "invalid_source"), ("/", 400, "invalid_source"), ("///", 400, "invalid_source"),
    ("/tmp", 400, "invalid_source"),  # a prefix of every upload's source
    ("~nosuchuser", 404, "document_not_found"), ("notes\x00.md", 400, "invalid_source"),
    ("notes.md", 404, "document_not_found"),  # a name, not a source
])
def test_delete_refuses_anything_but_one_exact_document(srv, source, status, code):
    ingest(srv, ("keep.md", NOTES_V1))
    before = rows(srv)
    r = delete(srv, source=source)
    assert r.status_code == status and r.json()["error"]["code"] == code, r.text
    assert rows(srv) == before


def test_delete_by_id_or_exact_source_removes_the_upload(srv):
    job = ingest(srv, ("first.md", b"# First\n\nThe first note.\n"), ("second.md", b"# Second\n\nThe second note.\n"))
    first, second = job["added"]
    docs = {d["source"]: d["id"] for d in httpx.get(srv.url + "/v1/knowledge/documents").json()["data"]}
    r = delete(srv, id=docs[first])
    assert r.status_code == 200 and r.json()["deleted"] == [{"id": docs[first], "source": first, "name": "first.md"}]
    r = delete(srv, source=second)
    assert r.status_code == 200
    assert first not in rows(srv) and second not in rows(srv)
    assert "first.md" not in uploads_on_disk(srv) and "second.md" not in uploads_on_disk(srv)
    assert delete(srv, id=docs[first]).status_code == 404


def test_delete_by_id_in_the_path(srv):
    (source,) = ingest(srv, ("by-path.md", b"# Path\n\nDeleted by its id in the path.\n"))["added"]
    docs = httpx.get(srv.url + "/v1/knowledge/documents").json()["data"]
    doc_id = next(d["id"] for d in docs if d["source"] == source)
    r = httpx.delete(f"{srv.url}/v1/knowledge/documents/{doc_id}", timeout=60)
    assert r.status_code == 200 and r.json()["deleted"][0]["source"] == source and source not in rows(srv)
    assert httpx.delete(f"{srv.url}/v1/knowledge/documents/{doc_id}", timeout=60).status_code == 404


@pytest.mark.parametrize("headers,code", [
    ({"Origin": "http://evil.example"}, "origin_not_allowed"),
    ({"Origin": "null"}, "origin_not_allowed"),  # sandboxed frames and file:// pages
    ({"Origin": "http://127.0.0.1:1"}, "origin_not_allowed"),  # another local service's page
    ({"Host": "evil.example"}, "host_not_allowed"),  # DNS rebinding: evil.example resolved to 127.0.0.1
])
def test_foreign_pages_cannot_change_the_kb(srv, headers, code):
    ingest(srv, ("owned.md", b"# Owned\n\nThe wipers park when the car is switched off.\n"))  # one to delete
    before = rows(srv)
    r = upload(srv, ("planted.md", b"# Planted\n\nCall 555-0100 for a free service.\n"), **headers)
    assert r.status_code == 403 and r.json()["error"]["code"] == code, r.text
    time.sleep(0.5)  # (a job, had one been queued, would have written by now)
    assert rows(srv) == before and "planted.md" not in uploads_on_disk(srv)
    source = next(iter(before))
    assert delete(srv, headers, source=source).status_code == 403 and source in rows(srv)


def test_own_page_and_plain_clients_are_served(srv):
    port = srv.url.rsplit(":", 1)[1]
    for origin, base in ((srv.url, srv.url), (f"http://localhost:{port}", f"http://localhost:{port}")):
        r = httpx.post(base + "/v1/knowledge/search", json={"query": "wipers", "k": 1}, headers={"Origin": origin})
        assert r.status_code == 200, r.text
    r = httpx.get(srv.url + "/v1/knowledge/documents", headers={"Origin": "http://evil.example"})
    assert r.status_code == 200  # reads are not refused by Origin (no CORS: a foreign page cannot read them)
    assert httpx.get(srv.url + "/health", headers={"Host": f"[::1]:{port}"}).status_code == 200
    assert httpx.get(srv.url + "/", headers={"Host": "evil.example"}).status_code == 403


def _raw_request(srv: Server, head: str, body: bytes) -> str:
    """Send a request head and part of a body, never finishing it; the server must answer anyway."""
    port = int(srv.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head.encode() + body)
        answer = b""
        while b"file_too_large" not in answer and (block := s.recv(4096)):
            answer += block
        return answer.decode(errors="replace")


def test_size_limit_acts_before_the_body_is_read(srv):
    boundary = "b0undary"
    part = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.txt\"\r\n"
            "Content-Type: text/plain\r\n\r\n").encode()
    head = (f"POST /v1/knowledge/documents HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\n")
    # announced as 512 MiB, but only the part header is sent: a server waiting for the body would hang
    answer = _raw_request(srv, head + f"Content-Length: {512 << 20}\r\n\r\n", part)
    assert answer.startswith("HTTP/1.1 413") and "file_too_large" in answer, answer
    # no length: refused as soon as the stream passes the limit, not at its (never sent) end
    chunk = b"x" * (1 << 20)
    body = f"{len(part):x}\r\n".encode() + part + b"\r\n" + (f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n") * 11
    answer = _raw_request(srv, head + "Transfer-Encoding: chunked\r\n\r\n", body)
    assert answer.startswith("HTTP/1.1 413") and "file_too_large" in answer, answer
    assert "big.txt" not in uploads_on_disk(srv)


def test_health_answers_while_uploads_are_ingested(srv):
    words = "brake wiper tyre pressure charge battery cable seat mirror door lock window heater fan".split()
    text = "\n\n".join(f"## Part {i}\n\n" + " ".join(words[(i * 7 + j) % len(words)] for j in range(120))
                       for i in range(60))  # ~50 kB: ~1,200 chunks of the tiny embedder per file
    jobs = [upload(srv, *[(f"bulk{n}-{i}.md", f"# Bulk {n}.{i}\n\n{text}".encode()) for i in range(4)]).json()
            for n in range(3)]
    slowest, polls, running = 0.0, 0, 0
    while httpx.get(f"{srv.url}/v1/knowledge/jobs/{jobs[-1]['id']}").json()["status"] in ("queued", "running"):
        started = time.monotonic()
        r = httpx.get(srv.url + "/health", timeout=30)
        slowest = max(slowest, time.monotonic() - started)
        assert r.status_code == 200 and httpx.get(srv.url + "/v1/models", timeout=30).status_code == 200
        polls += 1
        running += httpx.get(f"{srv.url}/v1/knowledge/jobs/{jobs[0]['id']}").json()["status"] == "running"
        time.sleep(0.05)
    assert polls >= 5, "the ingest ended before /health could be measured during it"
    assert slowest < 1.0, f"/health took {slowest:.2f}s during an ingest"
    assert all(srv.wait_job(job)["status"] == "succeeded" for job in jobs)
    assert sum(s.startswith(str(srv.kb.resolve() / "uploads" / "bulk")) for s in rows(srv)) == 12
