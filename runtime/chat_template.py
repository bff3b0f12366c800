"""Render a model's Jinja chat template the way Hugging Face transformers does.

Same environment as transformers' `apply_chat_template`: an immutable sandbox with
trim_blocks/lstrip_blocks, loop controls, a `tojson` that keeps non-ASCII text, and the
`raise_exception` / `strftime_now` helpers templates call. Any failure, from a syntax error to a
template's own `raise_exception`, surfaces as one `ChatTemplateError`.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """The chat template cannot be compiled or refused to render these messages."""


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}` renders its body unchanged.

    transformers uses the block to build assistant-token masks for training; without this tag
    templates that contain it would not even compile.
    """

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str):
    raise jinja2.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # jinja's own tojson HTML-escapes and forces ASCII, which changes the prompt text
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=1)
def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationBlock, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _describe(error: Exception) -> str:
    line = getattr(error, "lineno", None)
    where = f" (template line {line})" if isinstance(error, jinja2.TemplateSyntaxError) and line else ""
    return f"chat template error{where}: {error}"


class ChatTemplate:
    """A chat template compiled once, rendered per conversation."""

    def __init__(self, template_text: str, bos_token: str | None = None, eos_token: str | None = None):
        try:
            self._template = _environment().from_string(template_text)
        except jinja2.TemplateError as e:
            raise ChatTemplateError(_describe(e)) from e
        # a None token is left undefined (renders as ""), never as the text "None"
        self._tokens = {k: v for k, v in (("bos_token", bos_token), ("eos_token", eos_token)) if v is not None}

    def render(self, messages: list[dict], add_generation_prompt: bool = True, **extra: Any) -> str:
        context = {"tools": None, "documents": None, **self._tokens, **extra}
        try:
            return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt, **context)
        except (jinja2.TemplateError, TypeError) as e:  # TypeError: e.g. a template adding str + None content
            raise ChatTemplateError(_describe(e)) from e


def render_chat(template: str, messages: list[dict], add_generation_prompt: bool = True, **extra: Any) -> str:
    """One-shot render; `extra` (bos_token, eos_token, tools, ...) is passed to the template."""
    return _compiled(template).render(messages, add_generation_prompt, **extra)


@lru_cache(maxsize=8)
def _compiled(template: str) -> ChatTemplate:
    return ChatTemplate(template)
