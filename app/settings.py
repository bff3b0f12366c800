"""Settings: pydantic models, every field with an env twin (HEXRAG_<FIELD>): the one place hexrag
reads its environment (besides where files live: models/home.py)."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from knowledge.ingest import MAX_FILE_BYTES
from models import home
from runtime.options import MAX_SPIN_US, SPIN_US, RuntimeOptions

PassageKVPrecision = Literal["float32", "float16", "int8", "k6v8"]  # app/answer/passage_kv.py PRECISIONS


def is_loopback(name: str) -> bool:
    """`localhost` or a loopback address (127.0.0.0/8, ::1)."""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class RuntimeSettings(BaseSettings):
    """How models run (runtime.options.RuntimeOptions), from HEXRAG_* names: what every command that
    opens a model reads, without the server's paths and limits."""

    model_config = SettingsConfigDict(env_prefix="HEXRAG_", extra="ignore")

    qnn_target: str | None = None  # which HTP build to load when a model holds several (sm8650 ...)
    qnn_soc_model: int | None = None  # HTP: a plain float graph is compiled at load for this SoC (57 ...)
    qnn_performance_mode: str = "burst"
    qnn_log_level: str = "error"  # verbose | info | warning | error | fatal
    threads: int | None = None
    spin_us: int = Field(default=SPIN_US, ge=0, le=MAX_SPIN_US)  # 0: CPU workers never spin
    # profiling: an ONNX Runtime profile per CPU session, QNN's detailed profile per HTP session
    profile: Path | None = None
    qnn_profile: Path | None = None

    def runtime(self, backend: str) -> RuntimeOptions:
        return RuntimeOptions(backend=backend, threads=self.threads, spin_us=self.spin_us, target=self.qnn_target,
                              soc_model=self.qnn_soc_model, performance_mode=self.qnn_performance_mode,
                              log_level=self.qnn_log_level, profile_dir=self.profile, qnn_profile_dir=self.qnn_profile)


class IngestSettings(BaseSettings):
    """How files are read into a knowledge base, from HEXRAG_* names (`hexrag ingest`)."""

    model_config = SettingsConfigDict(env_prefix="HEXRAG_", extra="ignore")

    max_file_mb: float = Field(default=MAX_FILE_BYTES / 2**20, gt=0)  # larger files are refused (read whole)


class Settings(RuntimeSettings, IngestSettings):
    """Server settings, the runtime's and ingestion's."""

    host: str = "127.0.0.1"
    port: int = 8000
    # defaults: what `hexrag quickstart` built into the hexrag home (models.home): the 1.5B where it
    # was built, else the tiny preset; the home's KB
    llm: Path = Field(default_factory=home.llm_dir)
    embedder: Path = Field(default_factory=home.embedder_dir)
    # reads the questions `embedder` cannot (Chinese with an English model), for a KB holding its vectors
    second_embedder: Path | None = Field(default_factory=home.second_embedder_dir)
    kb: Path = Field(default_factory=home.kb_dir)
    # auto: the NPU where this is a Snapdragon device whose SoC the models were built for, else the
    # CPU (app.device.settle decides and says why)
    backend: Literal["cpu", "htp", "auto"] = "cpu"
    bundle: Path | None = None  # serve from a device bundle (hexrag export bundle): its models and KB
    api_key: str | None = None

    max_queue: int = 4  # requests waiting for the accelerator beyond the one generating
    queue_timeout_s: float = 30.0  # longest wait for the accelerator before a 503
    request_timeout_s: float = 120.0  # a generation running longer is cancelled
    max_upload_bytes: int = 10 * 1024 * 1024  # per upload request
    max_pending_uploads: int = 8  # upload ingest jobs queued or running; more get a 429
    max_request_bytes: int = 1024 * 1024  # chat and embeddings request bodies
    docs: bool = False  # /docs and /redoc (their scripts come from a CDN)

    # keep each passage's KV rows (under the KB directory, per LLM build) and place them into later
    # prompts instead of prefilling the passage again (app/answer/passage_kv.py); None: wherever the
    # LLM's cache can take placed rows (not a quantized KV cache), with RAG on
    passage_kv: bool | None = None
    passage_kv_max_mb: int | None = Field(default=None, ge=1)  # None: passage_kv.DISK_BYTES; least recently used go
    # how kept passage rows are stored on disk (passage_kv.PRECISIONS): k6v8 (keys at 6 bits, values at
    # 8) is under a quarter of float32's size, and the model's next tokens after its rows move no more
    # than after float16 rows (half of float32) or rows with a millionth's noise (docs/benchmarks.md,
    # "Keys at 6 bits, values at 8")
    passage_kv_precision: PassageKVPrecision = "k6v8"
    # prompt lookup (runtime/lookup.py) for greedy answers: voice answers only (the measured default:
    # as accurate, the first sentence sooner), every answer, or none (docs/benchmarks.md)
    prompt_lookup: Literal["voice", "all", "off"] = "voice"
    rag_k: int = 4
    rag_min_score: float | None = None  # None: the knowledge base's calibrated default
    default_max_tokens: int = 256
    # applied when a request sets no penalty: small models loop without one (llama.cpp uses 1.1 too)
    default_repetition_penalty: float = 1.1

    def runtime(self, backend: str | None = None) -> RuntimeOptions:
        """The options every model of this process opens with; `backend` overrides the setting
        (which must be settled by then: app.device.settle turns auto into cpu or htp)."""
        return super().runtime(backend or self.backend)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def check(self) -> None:
        """Refuse to serve beyond this machine without an API key."""
        if not self.loopback and not self.api_key:
            raise ValueError(f"binding to {self.host} exposes the server beyond this machine: "
                             "set an API key (--api-key or HEXRAG_API_KEY)")
