"""A knowledge base's answer profile: what is specific to one KB's answers, stored with it (in its
SQLite meta table, so it moves with the KB and a copy keeps it).

The answer layer's code holds mechanisms only; who the assistant is, whom it speaks to, and which
words say nothing about a question in this KB are the KB's data. Every field has a default that
suits any KB, so a KB without a profile gets a neutral assistant.

    hexrag kb profile                   # the profile in use (the defaults when none is set)
    hexrag kb profile --set FILE.json   # store one (fields left out keep their defaults)
    hexrag kb profile --reset           # back to the defaults
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

META_KEY = "answer_profile"


class AnswerProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    assistant: str = Field(
        default="You are an assistant that answers questions from the user's own documents.",
        description="The first sentence of the answer instructions: who the assistant is.")
    user: str = Field(default="the user", description="Whom answers speak to, as the instructions name them "
                                                      "(\"the driver\", \"the customer\").")
    listening: str = Field(default="The user hears your answer read aloud",
                           description="How a spoken answer reaches the user (voice mode).")
    stop_words: list[str] = Field(
        default_factory=list,
        description="Words that say nothing about what a question of this KB asks, because every question "
                    "could use them (a car manual's \"car\" and \"vehicle\", its product name).")

    # the answerability thresholds (app/answer/passages.py and judge.py have the defaults and where they were
    # measured); set them for a KB after measuring its own answerable and unanswerable questions
    min_confidence: float | None = Field(default=None, ge=-1, le=2, description="Least cosine + 0.2 x term "
                                         "coverage of the best passage for a question the embedder reads.")
    min_bm25: float | None = Field(default=None, ge=0, description="Least BM25 of the best passage for a question "
                                                                   "the embedder cannot read.")
    min_answers: float | None = Field(default=None, ge=0, le=1, description="Least probability the answer model "
                                      "gives a passage's sentences answering a question that uses words the KB never "
                                      "writes, for them to be said when its own answer fails its checks.")

    @field_validator("assistant", "user", "listening")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()

    @field_validator("stop_words")
    @classmethod
    def _words(cls, value: list[str]) -> list[str]:
        return sorted({w.strip().lower() for w in value if w.strip()})
