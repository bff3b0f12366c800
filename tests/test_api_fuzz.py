"""Property-based requests from the OpenAPI document against a real server (schemathesis, every check):
no input the schema lets a client send, valid or not, may give a 5xx or a status the document does not
list; a request the schema allows is accepted, one it forbids is refused, and responses match the
document.

The tiny random-weight models answer fast; the knowledge base holds the sample FAQ, and the fuzzed
`rag` field takes chat through both the grounded and the plain path. Bounded to a few examples per
operation and generation mode (~1 minute).

Schemathesis is driven through its Python API (operations as Hypothesis strategies under `@given`),
not its pytest plugin: the plugin reads pytest internals that change between pytest releases.
"""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.core.result import Ok  # noqa: E402
from schemathesis.generation.modes import GenerationMode  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from tests.api_server import Server  # noqa: E402
from tests.conftest import SAMPLES  # noqa: E402

EXAMPLES_PER_OPERATION = 15


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


def _accepted_unless_too_long(ctx, response, case):
    """positive_data_acceptance, but for the one refusal no schema can state: a conversation longer than
    the model's context (counted in tokens) is refused as OpenAI refuses it, a 400 with its own code."""
    if response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded":
        return None
    return positive_data_acceptance(ctx, response, case)


def _fuzz(operation, mode: GenerationMode) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck),
              database=None)
    def run(case):
        case.call_and_validate(excluded_checks=[positive_data_acceptance],
                               additional_checks=[_accepted_unless_too_long], timeout=30)

    run()


def test_no_server_errors_and_no_undocumented_statuses(tiny_server):
    schema = schemathesis.openapi.from_url(tiny_server.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert all(isinstance(result, Ok) for result in schema.get_all_operations()), "the OpenAPI document is invalid"
    # Every documented route is fuzzed; a schema that lost its routes must not pass by testing nothing.
    labels = {op.label for op in operations}
    assert {"POST /v1/chat/completions", "POST /v1/embeddings", "GET /v1/models", "POST /v1/knowledge/documents",
            "DELETE /v1/knowledge/documents/{doc_id}"} <= labels, labels
    failures = []
    for operation in operations:
        for mode in GenerationMode:
            try:
                _fuzz(operation, mode)
            except Unsatisfiable:
                # No request breaks the schema of an operation without parameters or body (GET /health):
                # there is nothing negative to send, as the plugin also concludes.
                assert mode is GenerationMode.NEGATIVE, operation.label
            except BaseException as exc:  # noqa: BLE001 (schemathesis raises exception groups) - every operation is tried, all failures reported together
                failures.append(f"{operation.label} [{mode.value}]: {type(exc).__name__}: {exc}")
    assert not failures, "\n\n".join(failures)
