"""Typed runtime errors; the CLI and the HTTP API map each to a clear message / status code."""


class RuntimeModelError(Exception):
    """The model directory cannot run here (wrong backend, target or version); the message says why."""


class Interrupted(Exception):
    """Background work on the model (keeping a passage's rows) stopped for a request a user waits on;
    the model's cache holds what it held before the interrupted step."""


class ContextOverflowError(Exception):
    """The prompt (plus what is already cached) does not fit the model's context."""

    def __init__(self, prompt_tokens: int, context: int, cached: int = 0):
        self.prompt_tokens, self.context, self.cached = prompt_tokens, context, cached
        super().__init__(
            f"{prompt_tokens} prompt tokens" + (f" after {cached} cached" if cached else "")
            + f" exceed the context of {context} tokens"
        )
