"""A SentencePiece "precompiled charsmap" made from a per-code-point normalization table.

`tokenizers`' Precompiled normalizer (what XLM-R's own tokenizer.json uses) reads SentencePiece's
binary form: a darts-clone double-array trie over the UTF-8 of the keys, whose leaves point into a
blob of NUL-terminated replacements:

    u32 trie bytes · u32 units[trie bytes / 4] · replacement\0 replacement\0 ...

A unit is one u32. A node at position p whose children sit at `base ^ label` stores
`(p ^ base) << 10 | has_leaf << 8 | its own label`; a node that ends a key has a leaf unit
`1 << 31 | replacement offset` at `base ^ 0`. Lookup starts at unit 0 (the root), so every base
used must be unique (a child's label is the only check) and the array must cover the whole
256-unit block of every base. Replacements may be empty: the code point is dropped.
"""

from __future__ import annotations

import struct

_LEAF = 1 << 31
_HAS_LEAF = 1 << 8
_MAX_OFFSET = 1 << 21  # offsets above this need darts' shifted form, which small tables never reach


class _Node:
    __slots__ = ("children", "value")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.value: int | None = None  # offset of the replacement, for a node that ends a key


def precompiled_charsmap(table: dict[int, str]) -> bytes:
    """The charsmap that replaces each code point of `table` with its text (and leaves others)."""
    root, blob = _Node(), bytearray()
    for cp, replacement in sorted(table.items()):
        node = root
        for byte in chr(cp).encode("utf-8"):
            node = node.children.setdefault(byte, _Node())
        node.value = len(blob)
        blob += replacement.encode("utf-8") + b"\0"
    units = _double_array(root)
    return struct.pack("<I", 4 * len(units)) + struct.pack(f"<{len(units)}I", *units) + bytes(blob)


def _double_array(root: _Node) -> list[int]:
    units: dict[int, int] = {}
    used_bases: set[int] = set()
    search_from = 256  # unit 0 is the root; its block holds nothing else

    def place(node: _Node, position: int, label: int) -> None:
        nonlocal search_from
        slots = ([0] if node.value is not None else []) + sorted(node.children)
        base = search_from
        while base in used_bases or any((base ^ s) in units for s in slots):
            base += 1
        used_bases.add(base)
        search_from = base  # each search starts at the last base found: the blocks fill in order
        offset = position ^ base
        if offset >= _MAX_OFFSET:
            raise ValueError("normalization table too large for a simple double array")
        units[position] = offset << 10 | (_HAS_LEAF if node.value is not None else 0) | label
        if node.value is not None:
            units[base] = _LEAF | node.value
        for byte in sorted(node.children):
            units[base ^ byte] = 0  # reserved before descending, so deeper nodes keep off it
        for byte, child in sorted(node.children.items()):
            place(child, base ^ byte, byte)

    place(root, 0, 0)
    size = (max(units) | 0xFF) + 1  # lookups index anywhere in the block of a base
    array = [0] * size
    for position, unit in units.items():
        array[position] = unit
    return array
