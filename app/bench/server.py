"""A real `hexrag serve` process on a free loopback port: what the soak measures and the API tests
talk to. Its resident memory is read from /proc, so the figures are the server's own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid: int) -> int | None:
    """VmRSS of a process in KiB (None once it is gone, or off Linux)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def follow_job(client: httpx.Client, job: dict, timeout: float | None = None) -> dict:
    """Poll an upload's ingest job (`client` talks to the server) until it has finished; after
    `timeout` seconds (None: no limit), TimeoutError."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while job["status"] in ("queued", "running"):
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"ingest job still {job['status']}: {job}")
        time.sleep(0.1)
        job = client.get(f"/v1/knowledge/jobs/{job['id']}").json()
    return job


class Server:
    def __init__(self, llm: Path | None, embedder: Path | None, kb: Path | None, log: Path,
                 command: list[str] | None = None, nice: int = 0, cwd: Path | None = None, **settings):
        """`command`: what starts the server instead of `hexrag serve --llm --embedder --kb` (it gets
        `--port`); `settings` become HEXRAG_<NAME> variables (None: left unset); `nice` lowers its
        priority (through nice(1), which execs the server, so `pid` is the server's); `cwd`: the
        directory it runs in."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.update({f"HEXRAG_{k.upper()}": str(v) for k, v in settings.items() if v is not None})
        args = [*command, "--port", str(self.port)] if command else [
            sys.executable, "-m", "app.cli", "serve", "--port", str(self.port), "--llm", str(llm),
            "--embedder", str(embedder), "--kb", str(kb)]
        if nice:
            args = ["nice", "-n", str(nice), *args]
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        self.log_path = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_kb(self) -> int | None:
        return rss_kb(self.proc.pid)

    def wait_ready(self, timeout: float = 300) -> dict:  # loading takes ~20 s; minutes on a busy machine
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text(errors='replace')[-2000:]}")
            try:
                r = httpx.get(self.url + "/health", timeout=2)
                if r.status_code == 200:
                    return r.json()
                if r.json().get("status") == "error":
                    raise RuntimeError(f"server failed to load: {r.json()}")
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"server not ready: {self.log_path.read_text(errors='replace')[-2000:]}")

    def wait_job(self, job: dict, timeout: float = 180) -> dict:
        """Poll an upload's ingest job until it has finished."""
        with httpx.Client(base_url=self.url, timeout=10) as client:
            return follow_job(client, job, timeout)

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind runs in the server."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._log.close()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
