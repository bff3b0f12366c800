"""The answer-eval domains are well formed: every split parses, every answerable question names a section
of the domain's own documents that states each of its facts, and unanswerable questions state none."""

from __future__ import annotations

import pytest

from app.bench.answers import _stated, load_answer_questions
from app.bench.domains import SPLITS, Domain, _files, domains_root, questions_file
from knowledge.evaluation import matches
from knowledge.loaders import is_supported, load_document
from knowledge.retrieval import Hit

DOMAINS = sorted(p for p in domains_root().iterdir() if (p / "domain.json").is_file())


def _sections(folder) -> list[Hit]:
    out = []
    for f in _files([(folder / d).resolve() for d in Domain.load(folder).documents]):
        if not is_supported(f):
            continue
        doc = load_document(f)
        out += [Hit(0, doc.text[s.start:s.end], str(f), f.name, " > ".join(s.heading), s.entry_id, 0.0)
                for s in doc.sections]
    return out


def test_there_are_three_domains():
    assert {p.name for p in DOMAINS} >= {"aurora", "flask", "debian-install"}


@pytest.mark.parametrize("folder", DOMAINS, ids=lambda p: p.name)
def test_every_question_names_sections_that_state_its_facts(folder):
    sections = _sections(folder)
    for split in SPLITS:
        questions = load_answer_questions(questions_file(folder, split))
        assert sum(not q.answerable for q in questions) >= len(questions) // 5, "too few unanswerable questions"
        for q in questions:
            if not q.answerable:
                assert not q.facts and not q.expected, q.question
                continue
            named = [h for h in sections if any(matches(h, e) for e in q.expected)]
            assert named, f"{split}: {q.question!r} names no section: {q.expected}"
            # a fact spelled as the documents write it, in one of the named sections (a list under a
            # heading of its own may sit in the section after: the whole page is searched then)
            pages = {h.name for h in named}
            text = " ".join(h.text for h in sections if h.name in pages)
            for spellings in q.facts:
                assert _stated(text, spellings) or any(_stated(h.text, spellings) for h in named), \
                    f"{split}: {q.question!r}: no named section states {spellings}"
