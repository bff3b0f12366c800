"""Property-based requests from the OpenAPI document against a real server (schemathesis): no input
the schema lets a client send, valid or not, may give a 5xx or a status the document does not list.

The tiny random-weight models answer fast; the knowledge base holds the sample FAQ, and the fuzzed
`rag` field takes chat through both the grounded and the plain path. Bounded to a few examples per
operation (~1 minute); uploads are left out (the multipart body is covered by test_api.py).
"""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import status_code_conformance  # noqa: E402

from tests.api_server import Server  # noqa: E402
from tests.conftest import SAMPLES  # noqa: E402


@pytest.fixture(scope="module")
def tiny_server(tiny_builds, tmp_path_factory):
    from knowledge import KnowledgeBase
    from runtime.embedder import Embedder

    kb_dir = tmp_path_factory.mktemp("fuzz_kb")
    with KnowledgeBase.open(kb_dir, Embedder(tiny_builds["bert"])) as kb:
        kb.ingest([SAMPLES / "aurora_faq.jsonl"], progress=False)
    srv = Server(tiny_builds["llama"], tiny_builds["bert"], kb_dir, tmp_path_factory.mktemp("fuzz_log") / "log.txt",
                 request_timeout_s=10)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def api_schema(tiny_server):
    schema = schemathesis.openapi.from_url(tiny_server.url + "/openapi.json")
    return schema.exclude(path="/v1/knowledge/documents", method="POST")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors_and_no_undocumented_statuses(case):
    case.call_and_validate(checks=[not_a_server_error, status_code_conformance], timeout=30)
