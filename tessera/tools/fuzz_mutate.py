"""Mutations of IR text for the fuzzer: small edits that keep most of a program intact.

Each mutation takes the text (bytes, so that it can also produce invalid UTF-8) and a
``random.Random`` and returns the edited text. They work on a rough MLIR tokenization
(:func:`tokenize`): whitespace, string literals, identifiers, SSA/symbol/attribute
names, numbers, single punctuation characters.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

_TOKEN = re.compile(
    rb'\s+|"(?:[^"\\\n]|\\.)*"?|[%@^#!][\w.$-]*|0x[0-9a-fA-F]+'
    rb"|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[A-Za-z_][\w.$]*|."
)

# Literals at the edges of what the IR and the hardware can hold.
INTERESTING_NUMBERS = [
    b"0", b"1", b"-1", b"2", b"3", b"7", b"64", b"255", b"65535", b"2147483647",
    b"2147483648", b"-2147483649", b"4294967296", b"9223372036854775807",
    b"9223372036854775808", b"-9223372036854775809", b"340282366920938463463374607431768211457",
    b"1.0e308", b"1e39", b"-0.0", b"0.5", b"0x7FC00000", b"0xFFFFFFFFFFFFFFFFFF",
]

TYPES = [
    b"f32", b"f16", b"bf16", b"f64", b"i1", b"i8", b"i16", b"i32", b"i64", b"index",
    b"f8E4M3FN", b"f8E5M2", b"f6E3M2FN", b"f6E2M3FN", b"f4E2M1FN", b"complex<f32>", b"ui8",
    b"none", b'"b32"', b'"pred"', b'"f64"', b'"u8"', b'"q99"',
]

# An element type: a word of its own, or the end of a shape (``4x8xf32``).
_TYPE_WORD = re.compile(
    rb"(?:(?<=\dx)|(?<![\w.$]))(?:bf16|f\d+E\d+M\d+(?:FNUZ|FN)?|[fi]\d+|ui\d+|index)(?![\w.$])"
)
_SHAPE_DIM = re.compile(rb"(?<=[<x])(\d+|\?)(?=x)")


def tokenize(text: bytes) -> list[bytes]:
    """``text`` cut into tokens; joining them gives ``text`` back."""
    return _TOKEN.findall(text)


def _solid(tokens: list[bytes]) -> list[int]:
    return [i for i, t in enumerate(tokens) if not t.isspace()]


def delete_token(text: bytes, rng: random.Random) -> bytes:
    tokens = tokenize(text)
    solid = _solid(tokens)
    if solid:
        del tokens[rng.choice(solid)]
    return b"".join(tokens)


def duplicate_token(text: bytes, rng: random.Random) -> bytes:
    tokens = tokenize(text)
    solid = _solid(tokens)
    if solid:
        i = rng.choice(solid)
        tokens.insert(i, tokens[i] + b" ")
    return b"".join(tokens)


def swap_tokens(text: bytes, rng: random.Random) -> bytes:
    tokens = tokenize(text)
    solid = _solid(tokens)
    if len(solid) >= 2:
        i, j = rng.sample(solid, 2)
        tokens[i], tokens[j] = tokens[j], tokens[i]
    return b"".join(tokens)


def mutate_literal(text: bytes, rng: random.Random) -> bytes:
    tokens = tokenize(text)
    numbers = [i for i, t in enumerate(tokens) if t[:1].isdigit()]
    if numbers:
        tokens[rng.choice(numbers)] = rng.choice(INTERESTING_NUMBERS)
    return b"".join(tokens)


def mutate_type(text: bytes, rng: random.Random) -> bytes:
    found = list(_TYPE_WORD.finditer(text))
    if not found:
        return text
    m = rng.choice(found)
    return text[: m.start()] + rng.choice(TYPES) + text[m.end() :]


def mutate_shape(text: bytes, rng: random.Random) -> bytes:
    dims = list(_SHAPE_DIM.finditer(text))
    if not dims:
        return text
    m = rng.choice(dims)
    new = rng.choice([b"?", b"0", b"1", b"3", b"2147483648", b"4294967297", b"65"])
    return text[: m.start()] + new + text[m.end() :]


def _lines(text: bytes) -> list[bytes]:
    return text.split(b"\n")


def swap_lines(text: bytes, rng: random.Random) -> bytes:
    lines = _lines(text)
    if len(lines) >= 2:
        i, j = rng.sample(range(len(lines)), 2)
        lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def delete_line(text: bytes, rng: random.Random) -> bytes:
    lines = _lines(text)
    if lines:
        del lines[rng.randrange(len(lines))]
    return b"\n".join(lines)


def duplicate_line(text: bytes, rng: random.Random) -> bytes:
    lines = _lines(text)
    if lines:
        i = rng.randrange(len(lines))
        lines.insert(rng.randrange(len(lines) + 1), lines[i])
    return b"\n".join(lines)


def truncate(text: bytes, rng: random.Random) -> bytes:
    return text[: rng.randrange(len(text) + 1)]


def insert_bytes(text: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(text) + 1)
    junk = rng.choice([b"\xff", b"\xc3", b"\x00", b'"', b"{", b"}", b"<", b">", b"(", b"%", b"^bb9"])
    return text[:at] + junk + text[at:]


MUTATIONS: dict[str, Callable[[bytes, random.Random], bytes]] = {
    "delete-token": delete_token,
    "duplicate-token": duplicate_token,
    "swap-tokens": swap_tokens,
    "literal": mutate_literal,
    "type": mutate_type,
    "shape": mutate_shape,
    "swap-lines": swap_lines,
    "delete-line": delete_line,
    "duplicate-line": duplicate_line,
    "truncate": truncate,
    "insert-bytes": insert_bytes,
}

# How often each mutation is drawn: token and literal edits keep programs closest to valid.
WEIGHTS: dict[str, int] = {
    "delete-token": 3, "duplicate-token": 2, "swap-tokens": 2, "literal": 5, "type": 5,
    "shape": 4, "swap-lines": 3, "delete-line": 2, "duplicate-line": 2, "truncate": 1,
    "insert-bytes": 1,
}


def mutate(text: bytes, rng: random.Random, count: int) -> tuple[bytes, list[str]]:
    """``text`` after ``count`` random mutations, and their names."""
    names = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()), k=count)
    for name in names:
        text = MUTATIONS[name](text, rng)
    return text, names
