"""On-device runtime: tokenization, chat prompts and generation on the exported models."""
