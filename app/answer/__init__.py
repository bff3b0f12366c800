"""The grounded answer layer shared by the chat API, `hexrag ask`/`chat` and the web page.

    question.py                  the question as meant (spoken repairs) and the kind of value it asks for
    passages.py / relevance.py   which retrieved passages an answer may use, and whether to answer at all
    facts.py / places.py         the hard facts of a sentence: numbers, phone numbers, menus, names; places
    bounds.py / pairing.py       the side of a bound a number is on, and which thing of a list it belongs to
    verify.py                    whether the passages state them
    extractive.py                the passage's own sentences, quoted when the model's answer fails
    sentences.py                 streamed text cut into the sentences that are checked and released
    plan.py                      plan_answer: everything decided before the model runs
    generation.py                GroundedGeneration: the model's sentences checked, released or replaced
    pipeline.py                  the two together: the entry the API, the CLI and the benches import
    passage_kv.py                kept KV rows placed instead of prefilled: the instructions' always, the first
                                 passage's with passage KV (opt-in)
"""
