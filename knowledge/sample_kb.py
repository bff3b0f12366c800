"""The sample knowledge base shipped in the package: which files are its documents, its answer profile
and the default PTQ calibration text is data stored beside them (samples/sample_kb.json), so no code
names one KB's files or persona."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pydantic import BaseModel

from knowledge.profile import AnswerProfile

SAMPLES = Path(str(resources.files("knowledge") / "samples"))
MANIFEST = "sample_kb.json"


class SampleKB(BaseModel):
    documents: list[str]  # file names under SAMPLES: what `hexrag quickstart` ingests
    profile: str  # the answer profile a KB filled with them starts with
    calibration: list[str]  # the text PTQ calibrates on when no --calib is given

    def document_paths(self) -> list[Path]:
        return [SAMPLES / name for name in self.documents]

    def calibration_paths(self) -> list[Path]:
        return [SAMPLES / name for name in self.calibration]

    def answer_profile(self) -> AnswerProfile:
        return AnswerProfile.model_validate_json((SAMPLES / self.profile).read_text(encoding="utf-8"))


def sample_kb() -> SampleKB:
    return SampleKB.model_validate_json((SAMPLES / MANIFEST).read_text(encoding="utf-8"))
