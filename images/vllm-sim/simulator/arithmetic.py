"""Arithmetic found in the last user message and evaluated without ``eval()``.

Digits and operators may be written with Unicode signs (a multiplication sign), an ``x`` between numbers, or
words (``13 times 17``, ``13乘17``); the last expression in the text wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_CHAR_MAP = {
    "×": "*",
    "✕": "*",
    "✖": "*",
    "·": "*",
    "⋅": "*",
    "∗": "*",
    "＊": "*",
    "÷": "/",
    "／": "/",
    "−": "-",
    "－": "-",
    "＋": "+",
    "（": "(",
    "）": ")",
    "＝": "=",
}
_CHAR_MAP.update({chr(0xFF10 + d): str(d) for d in range(10)})
_TRANSLATE = str.maketrans(_CHAR_MAP)
_WORD_OPS = [
    (re.compile(r"\bmultiplied\s+by\b|\btimes\b|\bmultiply\b", re.IGNORECASE), "*"),
    (re.compile(r"\bdivided\s+by\b", re.IGNORECASE), "/"),
    (re.compile(r"\bplus\b", re.IGNORECASE), "+"),
    (re.compile(r"\bminus\b", re.IGNORECASE), "-"),
    (re.compile(r"\bto\s+the\s+power\s+of\b", re.IGNORECASE), "^"),
    (re.compile(r"乘以?"), "*"),
    (re.compile(r"除以"), "/"),
    (re.compile(r"加上?"), "+"),
    (re.compile(r"减去?"), "-"),
]
_X_MUL = re.compile(r"(?<=[\d)])\s*[xX]\s*(?=[\d(])")
_CANDIDATE = re.compile(r"[\d.()+\-*/^ \t]+")
_ATOM_RE = re.compile(r"\s*(\d+(?:\.\d+)?|\*\*|[-+*/^()])")


class _ParseError(Exception):
    pass


class _Parser:
    def __init__(self, tokens: list):
        self.toks = tokens
        self.i = 0
        self.binops = 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self):
        tok = self.peek()
        if tok is None:
            raise _ParseError("unexpected end")
        self.i += 1
        return tok

    def parse(self) -> Fraction:
        value = self.expr()
        if self.i != len(self.toks):
            raise _ParseError("trailing tokens")
        return value

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            self.binops += 1
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.unary()
            self.binops += 1
            if op == "*":
                value = value * rhs
            else:
                if rhs == 0:
                    raise ZeroDivisionError
                value = value / rhs
        return value

    def unary(self) -> Fraction:
        if self.peek() in ("-", "+"):
            op = self.take()
            value = self.unary()
            return -value if op == "-" else value
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() in ("^", "**"):
            self.take()
            exp = self.unary()
            self.binops += 1
            if exp.denominator != 1 or abs(exp) > 64:
                raise _ParseError("exponent out of range")
            if base == 0 and exp < 0:
                raise ZeroDivisionError
            if abs(base.numerator) > 10**12 or base.denominator > 10**12:
                raise _ParseError("base out of range")
            return base ** int(exp)
        return base

    def atom(self) -> Fraction:
        tok = self.take()
        if tok == "(":
            value = self.expr()
            if self.take() != ")":
                raise _ParseError("expected )")
            return value
        if tok[0].isdigit():
            if len(tok) > 40:
                raise _ParseError("number too long")
            return Fraction(tok)
        raise _ParseError(f"unexpected {tok}")


def _lex(text: str) -> list | None:
    toks = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _ATOM_RE.match(text, pos)
        if not m:
            return None
        toks.append(m.group(1))
        pos = m.end()
    return toks


def format_number(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.10f}".rstrip("0").rstrip(".")
    return text if text not in ("-0", "") else "0"


@dataclass
class Arithmetic:
    expression: str
    value: Fraction | None  # None: division by zero
    result: str


def find_arithmetic(text: str) -> Arithmetic | None:
    """Find and evaluate the last arithmetic expression in text (13*17, 13 x 17, 12+30, with a multiplication sign ...)."""
    s = (text or "").translate(_TRANSLATE)
    for pattern, op in _WORD_OPS:
        s = pattern.sub(f" {op} ", s)
    s = _X_MUL.sub("*", s)
    candidates = [m.group().strip(" \t.") for m in _CANDIDATE.finditer(s)]
    for cand in reversed(candidates):
        if len(cand) > 400 or not re.search(r"\d", cand):
            continue
        toks = _lex(cand)
        if not toks:
            continue
        found = _best_window(toks)
        if found is not None:
            return found
    return None


def _best_window(toks: list) -> Arithmetic | None:
    n = len(toks)
    for length in range(n, 2, -1):
        for start in range(n - length, -1, -1):
            window = toks[start : start + length]
            parser = _Parser(window)
            try:
                value = parser.parse()
            except ZeroDivisionError:
                expr = "".join(window)
                return Arithmetic(expr, None, "undefined")
            except _ParseError:
                continue
            if parser.binops >= 1:
                return Arithmetic("".join(window), value, format_number(value))
    return None
