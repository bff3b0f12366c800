"""Measurement against the peers: speed side by side, NPU build metrics, an accuracy + speed report
with a regression baseline. The app stage may import every other stage, so this lives here.

    runners.py        one run of one system (hexrag, llama.cpp, ONNX Runtime GenAI) in its own process
    llm_speed.py      interleaved runs of those processes, medians, ratios, the table
    genai_export.py   a GenAI model folder from a GGUF (its builder needs torch: run in a side venv)
    build_metrics.py  what an HTP build costs and an analytical decode ceiling per chip
    chips.py          published memory bandwidths and AI Hub device results (with sources)
    report.py         `hexrag eval --all`: retrieval, quantization, answers, RAG TTFT, speed ratios
    quick.py          the tiny random-weight models quick mode builds for itself
    baseline.py       which report metrics are gated, and the comparison against a baseline
    soak.py           `hexrag bench soak`: streaming clients, /health under an upload, SIGKILL trials
    soak_load.py      streaming clients judged by their wire format, RSS drift, /health probes
    soak_faults.py    SIGKILL of `hexrag ingest` and of the server, and the consistency checks after
    server.py         a real `hexrag serve` process on a free loopback port (also the tests' server)
"""
