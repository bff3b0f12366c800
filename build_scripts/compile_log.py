"""What the QNN compiler said, per graph: the child process's verbose log parsed into reports.

The compile worker (build_scripts/compile.py) writes a MARKER line before and after each graph;
between them QNN logs, per node, "Validation PASSED/FAILED … REASON", and at finalize the nodes it
could not create. A report holds where every node went, the nodes QNN refused and why, and the
binary written; `failure_message` turns failed reports into one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from runtime import qnn
from runtime.qnn_targets import Target

MARKER = "@@HEXRAG-QNN-JOB"



@dataclass
class NodeIssue:
    name: str
    op_type: str
    reason: str


@dataclass
class CompileReport:
    onnx_path: Path
    ctx_path: Path
    target: Target
    fp16: bool
    shared: bool
    ok: bool = False
    seconds: float | None = None  # session creation time (= QNN compile + context write)
    binary: Path | None = None  # the context binary the EPContext model references
    placements: dict[str, str] = field(default_factory=dict)  # node name -> "QNN" | "CPU"
    op_types: dict[str, str] = field(default_factory=dict)  # node name -> op type
    removed: list[str] = field(default_factory=list)  # source nodes ONNX Runtime optimised away
    rejected: list[NodeIssue] = field(default_factory=list)  # nodes QNN refused, with its reason
    uncreated: list[str] = field(default_factory=list)  # nodes that passed validation but QNN could not build
    error: str | None = None
    sdk_version: str | None = None  # ep_sdk_version in the EPContext node
    log_path: Path | None = None  # full verbose log (kept on failure or when asked)
    group: list["CompileReport"] = field(default_factory=list)  # all reports of a shared group

    @property
    def htp_nodes(self) -> list[str]:
        return [n for n, p in self.placements.items() if p == "QNN"]

    @property
    def cpu_nodes(self) -> list[str]:
        return [n for n, p in self.placements.items() if p != "QNN"]

    def summary(self) -> dict:
        return {"onnx": str(self.onnx_path), "ctx": str(self.ctx_path), "binary": str(self.binary) if self.binary else None,
                "target": self.target.name, "ok": self.ok, "seconds": self.seconds, "htp_nodes": len(self.htp_nodes),
                "cpu_nodes": self.cpu_nodes, "rejected": [vars(r) for r in self.rejected], "error": self.error}



_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_VALIDATION = re.compile(r"Validation (PASSED|FAILED) for \d+ nodes in \w+ \((\w+)\)")
_NODE = re.compile(r"Operator type: (\S+) Node name: (.*?) Node index: \d+")
_REASON = re.compile(r"^\s*REASON\s*:\s*(.*)$")
_UNSUPPORTED = re.compile(r"\{ name: (.*?), type: (\w+) \}")
_UNCREATED = re.compile(r'<E> "(.*?)" generated: could not create op')  # at finalize, after validation


@dataclass
class _Section:
    verdicts: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # node -> (verdict, op, reason)
    unsupported: dict[str, str] = field(default_factory=dict)  # node -> op
    errors: list[str] = field(default_factory=list)  # [E:] lines
    uncreated: list[str] = field(default_factory=list)  # nodes QNN could not create at finalize


def parse_log(path: Path, n_jobs: int) -> dict[int, _Section]:
    sections: dict[int, _Section] = {}
    cur: _Section | None = None
    pending: list[str] = []  # node names of the last validation block
    verdict = ""
    with open(path, "r", errors="replace") as f:
        for raw in f:
            line = _ANSI.sub("", raw.rstrip("\n"))
            if line.startswith(MARKER):
                parts = line.split()
                cur = sections.setdefault(int(parts[1]), _Section()) if parts[2] == "start" else None
                pending = []
                continue
            if cur is None:
                continue
            m = _VALIDATION.search(line)
            if m:
                verdict, pending = m.group(1), []
                continue
            m = _NODE.search(line)
            if m and verdict:
                op, name = m.group(1), m.group(2)
                cur.verdicts[name] = (verdict, op, "")
                pending.append(name)
                continue
            m = _REASON.match(line)
            if m and pending:
                for name in pending:
                    v, op, _ = cur.verdicts[name]
                    cur.verdicts[name] = (v, op, m.group(1).strip())
                continue
            m = _UNCREATED.search(line)
            if m:
                cur.uncreated.append(m.group(1))
                continue
            if "[E:" in line:
                cur.errors.append(re.sub(r"^.*?\[E:[^\]]*\]\s*", "", line).strip())
                for name, op in _UNSUPPORTED.findall(line):
                    cur.unsupported[name] = op
            if line.strip() == "":
                pending, verdict = [], ""
    return sections


def fill_report(rep: CompileReport, result: dict | None, section: _Section | None) -> None:
    source = _source_nodes(rep.onnx_path)
    section = section or _Section()
    for name, (verdict, op, reason) in section.verdicts.items():
        rep.op_types[name] = op
        rep.placements[name] = "QNN" if verdict == "PASSED" else "CPU"
        if verdict == "FAILED":
            rep.rejected.append(NodeIssue(name, op, _short_reason(reason) or "rejected by QNN validation"))
    for name, op in section.unsupported.items():
        if name not in rep.placements or rep.placements[name] == "QNN":
            rep.placements[name] = "CPU"
            rep.op_types[name] = op
            if not any(r.name == name for r in rep.rejected):
                rep.rejected.append(NodeIssue(name, op, "not supported by the QNN EP"))
    rep.removed = [n for n in source if n not in rep.placements]
    if result is None:
        return
    rep.seconds = result.get("seconds")
    if result.get("ok"):
        rep.ok = True
        # CPU fallback is disabled: a session that exists runs every node on QNN
        for name in rep.placements:
            rep.placements[name] = "QNN"
        rep.rejected = []
        if rep.ctx_path.is_file():
            kind = qnn.inspect_graph(rep.ctx_path)
            rep.binary, rep.sdk_version = (kind.binaries or (None,))[0], kind.sdk_version
    else:
        rep.error = qnn.ort_message(result.get("error") or "session creation failed")
        rep.uncreated = list(dict.fromkeys(section.uncreated))
        if not rep.rejected:  # add what QNN itself logged as errors, if it said more than the exception
            extra = [e for e in dict.fromkeys(qnn.ort_message(x) for x in section.errors) if e and e not in rep.error]
            if extra:
                rep.error += " (QNN: " + "; ".join(extra[-2:]) + ")"


def _source_nodes(path: Path) -> list[str]:
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001
        return []
    return [n.name for n in model.graph.node]


def _short_reason(reason: str) -> str:
    # QNN glues a second sentence on without a space: "…by QNN EP.Trilu node `x` will not be …"
    return re.sub(r"\.(?=[A-Z])", ". ", reason).split(". ")[0].rstrip(".") if reason else ""


_HINTS = {
    "QNN_COMMON_ERROR_MEM_ALLOC": "the graph does not fit one HTP context (split the model into smaller parts), "
                                  "or the target's HTP has no float support (quantize first)",
}


def failure_message(failed: list[CompileReport], target: Target, log_path: Path | None) -> str:
    parts = []
    for rep in failed:
        where = rep.onnx_path.name
        if rep.rejected:
            nodes = "; ".join(f"{r.name} ({r.op_type}: {r.reason})" for r in rep.rejected)
            parts.append(f"{where}: {len(rep.rejected)} node(s) cannot run on HTP: {nodes}")
        else:
            hint = next((h for k, h in _HINTS.items() if k in (rep.error or "")), "")
            if not target.float_ok and rep.fp16 and "MEM_ALLOC" in (rep.error or ""):
                hint = f"{target.name} (v{target.htp_arch}) has no float HTP: quantize the model first"
            if rep.uncreated:  # what QNN logged at finalize says more than its MEM_ALLOC code
                more = len(rep.uncreated) - 6
                hint = (f"QNN could not create {len(rep.uncreated)} node(s) that had passed validation for "
                        f"{target.name}: {', '.join(rep.uncreated[:6])}{f' and {more} more' if more > 0 else ''}")
            parts.append(f"{where}: {rep.error}" + (f" ({hint})" if hint else ""))
    return (f"HTP compile for {target.name} (soc {target.soc_model}, v{target.htp_arch}) failed: " + " | ".join(parts)
            + (f" [verbose log: {log_path}]" if log_path else ""))
