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


def test_two_evals_of_one_domain_share_the_kb_the_first_to_finish_ingested(tiny_builds, tmp_path, monkeypatch):
    """Two evals started together both ingest a domain new to the cache: the one finishing second uses
    the KB the first stored instead of failing on its rename."""
    import shutil

    from app.bench.domains import domain_kb
    from knowledge import KnowledgeBase
    from runtime.embedder import Embedder

    folder = tmp_path / "tiny"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs" / "guide.md").write_text("# Guide\n\n## Filters\n\nReplace the filter every 6 months.\n")
    (folder / "domain.json").write_text('{"documents": ["docs"]}')
    monkeypatch.setenv("HEXRAG_CACHE", str(tmp_path / "cache"))
    embedder = Embedder(tiny_builds["bert"])
    ingest, copies, started = KnowledgeBase.ingest, [], []

    def ingest_after_another(kb, *args, **kwargs):  # the other eval stores the same KB meanwhile
        if not started:
            started.append(True)
            copies.append(domain_kb(folder, embedder, progress=False))
        return ingest(kb, *args, **kwargs)

    monkeypatch.setattr(KnowledgeBase, "ingest", ingest_after_another)
    copies.append(domain_kb(folder, embedder, progress=False))
    assert len(list((tmp_path / "cache" / "eval-kbs").iterdir())) == 1  # one stored KB, no stray build left
    for copy in copies:
        with KnowledgeBase.open(copy) as kb:
            assert "6 months" in "".join(h.text for h in kb.all_hits())
        shutil.rmtree(copy)  # the caller removes the copies domain_kb makes
