"""The HTTP edge: bad or unsupported input, typed errors, size limits and the OpenAPI document.

The app runs in-process (TestClient) on the tiny random-weight models with an empty knowledge base
(a plain chat), so every case is fast; what needs a real socket is in test_api.py.
"""

from __future__ import annotations

import json
import time

import pytest
from fastapi.testclient import TestClient

from app.errors import DOMAIN_ERRORS, as_api_error
from app.main import create_app
from app.settings import Settings
from knowledge.errors import (EmbedderMismatchError, EmbedderRequiredError, IngestError, KnowledgeBaseCorruptError,
                              KnowledgeError, UnknownDocumentError)
from models.manifest import ManifestError
from runtime.chat_template import ChatTemplateError
from runtime.errors import ContextOverflowError, RuntimeModelError

HI = [{"role": "user", "content": "hi"}]
LIMIT = 64 * 1024


@pytest.fixture(scope="module")
def app(tiny_builds, tmp_path_factory):
    settings = Settings(llm=tiny_builds["llama"], embedder=tiny_builds["bert"], kb=tmp_path_factory.mktemp("kb"),
                        threads=1, max_request_bytes=LIMIT)
    return create_app(settings)


@pytest.fixture(scope="module")
def api(app):
    # the server is bound to loopback: requests must name this machine (the Host guard)
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        deadline = time.monotonic() + 60
        while client.get("/health").status_code != 200:
            assert time.monotonic() < deadline, client.get("/health").json()
            time.sleep(0.05)
        yield client


def chat(api, **body):
    return api.post("/v1/chat/completions", json={"model": "hexrag", "messages": HI, "max_tokens": 3, **body})


def raw(api, path: str, text: str):
    return api.post(path, content=text.encode(), headers={"content-type": "application/json"})


def assert_error(r, status: int, code: str, param: str | None = None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["message"] and err["type"], err
    if param is not None:
        assert err["param"] == param, err


@pytest.mark.parametrize("body", [
    {"temperature": 1e-320}, {"temperature": 1.0, "repetition_penalty": 0.01}, {"temperature": 2, "top_p": 1e-320},
    {"temperature": 0.7, "seed": -1}, {"temperature": 0.7, "seed": 2**70}, {"top_k": 10**30, "temperature": 1},
])
def test_extreme_valid_sampling_parameters_answer(api, body):
    r = chat(api, **body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")


def test_negative_seed_is_the_seed_modulo_2_64(api):
    def text(seed):
        return chat(api, temperature=1.5, seed=seed, max_tokens=8).json()["choices"][0]["message"]["content"]

    assert text(-1) == text(2**64 - 1)


@pytest.mark.parametrize("text,param", [
    ('{"temperature": NaN}', "temperature"), ('{"temperature": Infinity}', "temperature"),
    ('{"top_p": NaN}', "top_p"), ('{"repetition_penalty": 5e-324}', "repetition_penalty"),
    ('{"repetition_penalty": NaN}', "repetition_penalty"), ('{"temperature": 2.5}', "temperature"),
    ('{"knowledge": {"min_score": NaN}}', "knowledge.min_score"),
])
def test_non_finite_or_absurd_sampling_values_are_400(api, text, param):
    body = json.loads(text)  # Python's json reads NaN/Infinity, as the server's parser does
    r = raw(api, "/v1/chat/completions", json.dumps({"messages": HI, **body}))
    assert_error(r, 400, "invalid_request", param)


@pytest.mark.parametrize("path,text,param", [
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "a\\ud800b"}]}', "messages.0.content"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}',
     "messages.0.content.0.text"),
    ("/v1/chat/completions", '{"model": "\\ud800", "messages": [{"role": "user", "content": "hi"}]}', "model"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "stop": ["\\ud800"]}', "stop.0"),
    ("/v1/embeddings", '{"input": "\\ud800"}', "input"),
    ("/v1/embeddings", '{"input": ["ok", "\\ud800"]}', "input.1"),
    ("/v1/embeddings", '{"input": "ok", "model": "\\ud800"}', "model"),
])
def test_lone_surrogates_are_400(api, path, text, param):
    assert_error(raw(api, path, text), 400, "invalid_request", param)


@pytest.mark.parametrize("body,param", [
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({"tool_choice": "auto"}, "tool_choice"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format"),
    ({"logprobs": True}, "logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"n": 2}, "n"),
    ({"n": 0}, "n"),
    ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"logit_bias": {"42": 5}}, "logit_bias"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]},
     "messages.0.content.0.type"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": ""}}]}]},
     "messages.0.content.0.type"),
])
def test_unsupported_openai_fields_are_refused(api, body, param):
    assert_error(chat(api, **body), 400, "unsupported_parameter", param)


def test_harmless_defaults_of_openai_fields_still_work(api):
    r = chat(api, n=1, logprobs=False, top_logprobs=None, response_format={"type": "text"}, user="u1",
             stream_options=None, tool_choice="none", frequency_penalty=0, presence_penalty=0.0, logit_bias={},
             messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}], metadata={"a": "b"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("body,status,code,param", [
    ({"input": "x", "dimensions": 8}, 400, "unsupported_parameter", "dimensions"),
    ({"input": []}, 400, "invalid_request", "input"),
    ({"input": ["x"] * 257}, 400, "invalid_request", "input"),
    ({"input": [1, 2, 3]}, 400, "invalid_request", None),
])
def test_embeddings_input_rules(api, body, status, code, param):
    assert_error(api.post("/v1/embeddings", json=body), status, code, param)


def test_embeddings_at_the_input_limit_work(api):
    r = api.post("/v1/embeddings", json={"input": ["tyre pressure"] * 256})
    assert r.status_code == 200 and len(r.json()["data"]) == 256


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings"])
def test_oversized_bodies_are_413_by_content_length_and_while_reading(api, path):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * LIMIT}], "input": "x" * LIMIT}).encode()
    assert_error(api.post(path, content=big, headers={"content-type": "application/json"}), 413,
                 "request_too_large")

    def chunks():  # no Content-Length: the limit applies to the bytes as they arrive
        yield b'{"input": "'
        for _ in range(LIMIT // 1024 + 1):
            yield b"x" * 1024
        yield b'"}'

    assert_error(api.post(path, content=chunks(), headers={"content-type": "application/json"}), 413,
                 "request_too_large")


# the status and code every typed library error must reach a client with (an independent copy of the table)
EXPECTED = [
    (ContextOverflowError(900, 512), 400, "context_length_exceeded"),
    (ChatTemplateError("Conversation roles must alternate"), 400, "invalid_request"),
    (UnknownDocumentError("no document 'x'"), 404, "document_not_found"),
    (IngestError("a.pdf", "not a PDF"), 400, "ingest_failed"),
    (EmbedderRequiredError("needs an embedder"), 400, "invalid_request"),
    (EmbedderMismatchError("other embedder"), 503, "knowledge_unavailable"),
    (KnowledgeBaseCorruptError("not a KB"), 503, "knowledge_unavailable"),
    (KnowledgeError("bad"), 400, "invalid_request"),
    (RuntimeModelError("no chat template"), 503, "model_unavailable"),
    (ManifestError("altered file"), 503, "model_unavailable"),
]


def test_every_domain_error_has_an_expectation():
    assert {type(e) for e, _, _ in EXPECTED} == set(DOMAIN_ERRORS)


@pytest.mark.parametrize("error,status,code", EXPECTED, ids=lambda v: type(v).__name__ if isinstance(v, Exception) else "")
def test_typed_errors_map_to_their_status_through_the_api(api, app, monkeypatch, error, status, code):
    import app.engine as engine

    def fail(*_, **__):
        raise error

    monkeypatch.setattr(engine, "plan_answer", fail)
    assert_error(chat(api), status, code)
    assert as_api_error(error).status == status


def test_a_stream_that_fails_after_the_200_ends_with_an_error_event_and_done(api, monkeypatch):
    import app.engine as engine

    class Failing(engine.GroundedGeneration):
        def __iter__(self):
            yield "Hello"
            raise RuntimeModelError("the NPU went away")

    monkeypatch.setattr(engine, "GroundedGeneration", Failing)
    with api.stream("POST", "/v1/chat/completions", json={"messages": HI, "stream": True}) as r:
        assert r.status_code == 200
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == "model_unavailable" and "NPU went away" in error["message"]
    assert json.loads(events[1])["choices"][0]["delta"]["content"] == "Hello"


def test_an_unexpected_failure_mid_stream_is_an_internal_error_event(api, monkeypatch):
    import app.engine as engine

    class Broken(engine.GroundedGeneration):
        def __iter__(self):
            raise ZeroDivisionError("secret detail")
            yield

    monkeypatch.setattr(engine, "GroundedGeneration", Broken)
    with api.stream("POST", "/v1/chat/completions", json={"messages": HI, "stream": True}) as r:
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == "internal_error" and "secret" not in error["message"]
    monkeypatch.undo()
    assert chat(api).status_code == 200  # the accelerator is free again


def test_method_not_allowed_names_every_method_of_the_path(api):
    r = api.get("/v1/chat/completions")
    assert_error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "OPTIONS, POST"
    r = api.put("/v1/knowledge/documents")
    assert_error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == "DELETE, GET, OPTIONS, POST"
    r = api.options("/v1/knowledge/documents")
    assert r.status_code == 204 and r.headers["allow"] == "DELETE, GET, OPTIONS, POST"


@pytest.mark.parametrize("messages,param,words", [
    ([{"role": "user", "content": None}], "messages.0.content", "user message needs content"),
    ([{"role": "user"}], "messages.0.content", "user message needs content"),
    ([HI[0], {"role": "tool", "content": None}], "messages.1.content", "tool message needs content"),
    ([{"role": "tool", "content": "42"}], "messages", "not a tool result"),
])
def test_messages_a_conversation_cannot_hold_are_400_naming_the_field(api, messages, param, words):
    r = chat(api, messages=messages)
    assert_error(r, 400, "invalid_request", param)
    assert words in r.json()["error"]["message"]


def test_an_assistant_message_may_have_no_content(api):
    r = chat(api, messages=[{"role": "assistant", "content": None}, *HI])
    assert r.status_code == 200, r.text


def test_truncated_json_says_where_the_body_breaks(api):
    r = raw(api, "/v1/chat/completions", '{"model": "hexrag", "messages": [{"role": "us')
    assert_error(r, 400, "invalid_request")
    err = r.json()["error"]
    assert err["param"] is None and err["message"].startswith("the body is not valid JSON")
    assert "character" in err["message"]


def test_openapi_documents_the_real_statuses(api):
    spec = api.get("/openapi.json").json()
    chat_op = spec["paths"]["/v1/chat/completions"]["post"]["responses"]
    assert {"200", "400", "401", "404", "413", "429", "503"} <= set(chat_op) and "422" not in chat_op
    assert "text/event-stream" in chat_op["200"]["content"]
    assert chat_op["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")
    error = spec["components"]["schemas"]["ErrorDetail"]
    assert {"message", "type", "code"} <= set(error["required"])
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            assert "422" not in op["responses"], (path, method)
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    props = spec["components"]["schemas"]["ChatRequest"]["properties"]
    assert props["n"]["const"] == 1 and "Not supported" in props["tools"]["description"]
    documents = spec["paths"]["/v1/knowledge/documents"]
    assert set(documents["post"]["responses"]) >= {"400", "413"}
    upload = documents["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert upload["required"] == ["files"] and upload["properties"]["files"]["minItems"] == 1
    assert [p["name"] for p in documents["delete"]["parameters"] if p["required"]] == ["source"]
    assert spec["paths"]["/v1/knowledge/documents/{doc_id}"]["delete"]["parameters"][0]["required"]
    assert "503" in spec["paths"]["/health"]["get"]["responses"]


def test_interactive_docs_are_off_by_default_so_nothing_loads_from_a_cdn(api):
    assert api.get("/docs").status_code == 404 and api.get("/redoc").status_code == 404
    assert api.get("/openapi.json").status_code == 200
