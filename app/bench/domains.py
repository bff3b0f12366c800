"""Answer evals per domain: a folder holding `domain.json` (the documents its knowledge base is made
of) and its question splits, `dev.jsonl` (read while the answer layer is built) and `holdout.jsonl`
(written before a change and only measured after it).

    knowledge/samples/evals/<domain>/
        domain.json      {"documents": [paths relative to the folder: files or folders],
                          "profile": the KB's answer profile (a path; optional: the defaults)}
        dev.jsonl        strict answer questions (app/bench/answers.py)
        holdout.jsonl

The domain's knowledge base is ingested once per embedder, set of documents and version of the
loaders into the cache (`$HEXRAG_CACHE/eval-kbs/`) and copied for each run, so a run never changes it.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from app.bench.errors import BenchError
from models import home

SPLITS = ("dev", "holdout")


def domains_root() -> Path:
    return Path(str(resources.files("knowledge") / "samples" / "evals"))


class Domain(BaseModel):
    model_config = ConfigDict(extra="forbid")
    documents: list[str]
    profile: str | None = None

    @classmethod
    def load(cls, folder: Path) -> Domain:
        try:
            return cls.model_validate_json((folder / "domain.json").read_text(encoding="utf-8"))
        except OSError as e:
            raise BenchError(f"{folder} is no answer-eval domain: {e.strerror} ({folder / 'domain.json'})") from None
        except ValidationError as e:
            raise BenchError(f"{folder / 'domain.json'}: {e.errors()[0]['msg']}") from None


def find_domain(name: str) -> Path:
    """A domain by its folder's name under knowledge/samples/evals, or any folder holding a domain.json."""
    folder = Path(name)
    if not (folder / "domain.json").is_file():
        folder = domains_root() / name
    if not (folder / "domain.json").is_file():
        known = ", ".join(sorted(p.name for p in domains_root().iterdir() if (p / "domain.json").is_file()))
        raise BenchError(f"no answer-eval domain {name!r} (known: {known}; or a folder with a domain.json)")
    return folder


def questions_file(folder: Path, split: str) -> Path:
    path = folder / f"{split}.jsonl"
    if not path.is_file():
        raise BenchError(f"domain {folder.name} has no {split} split ({path})")
    return path


def _files(paths: list[Path]) -> list[Path]:
    out = []
    for p in paths:
        if not p.exists():
            raise BenchError(f"a document of the domain is missing: {p}")
        out += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    return out


def domain_kb(folder: Path, embedder, progress: bool = True, second=None) -> Path:
    """A fresh copy of the domain's knowledge base (the caller removes it), ingested into the cache
    on first use for this embedder and these documents; with `second`, a second embedder, when the
    documents hold Chinese (quickstart's rule, app.quickstart.choose_embedders)."""
    from app.quickstart import SECOND_SHARE, documents_cjk_share
    from knowledge import AnswerProfile, KnowledgeBase

    domain = Domain.load(folder)
    documents = [(folder / d).resolve() for d in domain.documents]
    profile = AnswerProfile()
    if domain.profile:
        try:
            profile = AnswerProfile.model_validate_json((folder / domain.profile).read_text(encoding="utf-8"))
        except (OSError, ValidationError) as e:
            raise BenchError(f"domain {folder.name}: its profile {domain.profile} cannot be used: {e}") from None
    if second is not None and (second.model_id == embedder.model_id
                               or documents_cjk_share(_files(documents)) < SECOND_SHARE):
        second = None
    digest = hashlib.sha256(embedder.model_id.encode() + (second.model_id.encode() if second else b""))
    # the documents, and the code that reads and chunks them: a loader's fix makes a new KB
    package = Path(str(resources.files("knowledge")))
    readers = [*sorted(package.glob("loaders/*.py")), package / "chunking.py"]
    for f in [*_files(documents), *readers]:
        digest.update(f.name.encode() + hashlib.sha256(f.read_bytes()).digest())
    cached = home.cache_dir() / "eval-kbs" / f"{folder.name}-{digest.hexdigest()[:16]}"
    if not cached.is_dir():
        cached.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=cached.parent))
        with KnowledgeBase.open(building, embedder, second_embedder=second) as kb:
            report = kb.ingest(documents, progress=progress)
        if report.failed:
            shutil.rmtree(building, ignore_errors=True)
            raise BenchError(f"domain {folder.name}: {len(report.failed)} document(s) failed to ingest: "
                             + "; ".join(f"{path}: {why}" for path, why in report.failed[:3]))
        try:
            building.rename(cached)
        except OSError:  # another eval of this domain ingested it first: theirs is the same KB
            shutil.rmtree(building, ignore_errors=True)
            if not cached.is_dir():
                raise
    copy = Path(tempfile.mkdtemp(prefix=f"hexrag-eval-{folder.name}-"))
    shutil.copytree(cached, copy, dirs_exist_ok=True)
    with KnowledgeBase.open(copy) as kb:  # the profile is set on the copy: editing it needs no new ingest
        kb.set_profile(profile)
    return copy
