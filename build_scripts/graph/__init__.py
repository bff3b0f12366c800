"""ONNX graph construction with the `onnx` package only (no torch at build time)."""
