"""`hexrag ask` (one answer) and `hexrag chat` (interactive), with the same RAG pipeline as the server."""

from __future__ import annotations

import json

import click

from app.cli_common import dir_options, friendly, given_settings

_options = [
    dir_options("llm", "embedder", "kb"),
    click.option("--backend", type=click.Choice(["cpu", "htp", "auto"]),
                 help="cpu | htp | auto (the NPU on a Snapdragon device with matching builds).  [env HEXRAG_BACKEND]"),
    click.option("--no-rag", is_flag=True, help="Answer without the knowledge base."),
    click.option("--voice", is_flag=True, help="Short spoken-style answer, sentence by sentence."),
]


def _with_options(fn):
    for option in reversed(_options):
        fn = option(fn)
    return fn


def _assistant(llm, embedder, kb, backend, no_rag):
    from app.assistant import Assistant
    from app.device import settle

    settings, choice = settle(given_settings(llm=llm, embedder=embedder, kb=kb, backend=backend), rag=not no_rag)
    click.echo(choice.line(), err=True)
    return Assistant(settings, rag=not no_rag)


def stream_answer(assistant, question, voice=False, keep_history=False):
    """Print the answer as it is generated; returns the finished `Answer`."""
    gen = assistant.ask(question, voice=voice, keep_history=keep_history)
    while True:
        try:
            piece = next(gen)
        except StopIteration as done:
            return done.value
        click.echo(piece, nl=False)


@click.command()
@click.argument("question")
@_with_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (answer, citations, usage).")
@friendly
def ask(question, llm, embedder, kb, backend, no_rag, voice, as_json) -> None:
    """Answer one question from the knowledge base (with citations)."""
    from app.assistant import citation_lines

    assistant = _assistant(llm, embedder, kb, backend, no_rag)
    if as_json:
        answer = assistant.answer(question, voice=voice)
        click.echo(json.dumps({"answer": answer.text, "citations": [c.model_dump() for c in answer.citations],
                               "grounding": answer.grounding.model_dump() if answer.grounding else None,
                               "finish_reason": answer.finish_reason, "prompt_tokens": answer.prompt_tokens,
                               "completion_tokens": answer.completion_tokens, "timings": answer.timings},
                              ensure_ascii=False))
        return
    answer = stream_answer(assistant, question, voice)
    click.echo()
    for line in citation_lines(answer.citations):
        click.echo(line, err=True)


@click.command()
@_with_options
@friendly
def chat(llm, embedder, kb, backend, no_rag, voice) -> None:
    """Interactive multi-turn chat in the terminal (empty line or Ctrl-D quits)."""
    from app.assistant import citation_lines

    assistant = _assistant(llm, embedder, kb, backend, no_rag)
    click.echo("hexrag chat: ask about your documents; an empty line quits.", err=True)
    while True:
        try:
            question = input("> ").strip()
        except EOFError:
            break
        if not question:
            break
        answer = stream_answer(assistant, question, voice, keep_history=True)
        click.echo()
        for line in citation_lines(answer.citations):
            click.echo(f"  {line}", err=True)


CHAT_COMMANDS = [ask, chat]
