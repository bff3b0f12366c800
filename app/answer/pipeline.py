"""The grounded answer: what the API, the CLI and the page say, and why.

    plan_answer (plan.py, no accelerator needed)   GroundedGeneration (generation.py, on the accelerator)
    ─────────────────────────────────────          ───────────────────────────────────────────────
    retrieval query ─► search ─► re-rank           LLM tokens ─► sentences ─► fact check per sentence
    ─► confidence low? ─► refuse                    ├─ supported   ─► released (held back for a
    ─► passages (one FAQ entry, or a budget)        │               quantity question until a number comes)
    ─► prompt ids + the extractive answer           ├─ "I don't know" ─► refuse (unless every part
                                                    │                asked has its passage sentence, or a
                                                    │                yes-or-no question's one entry answers it)
                                                    └─ unsupported / empty ─► stop the model, then
                                                       the extractive answer (unless the question
                                                       names what the KB lacks) or "I don't know"

Only verified sentences are ever released, streamed or not, so the two are the same text.
"""

from app.answer.generation import AnswerResult, GroundedGeneration
from app.answer.plan import DONT_KNOW, AnswerPlan, plan_answer

__all__ = ["DONT_KNOW", "AnswerPlan", "AnswerResult", "GroundedGeneration", "plan_answer"]
