"""Build stage: weights (GGUF / Hugging Face) -> static ONNX graphs -> model directory with a manifest."""
