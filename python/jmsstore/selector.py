"""JMS message selectors (JMS 2.0 specification, section 3.8.1).

A selector is a boolean expression over a message's header fields and
properties, written in a subset of SQL92 conditional expression syntax::

    sel = Selector("color = 'red' AND weight BETWEEN 10 AND 20")
    sel.matches(headers, properties)  # True only when the expression is TRUE

The text is tokenized and parsed by hand (recursive descent) once, at
construction, into a tree of Python closures; evaluation runs the closures.
Evaluation follows SQL three-valued logic: ``None`` stands for both NULL and
UNKNOWN, and a message is selected only when the result is ``True``.
Integer arithmetic is exact in the range of a Java long; a result outside it
becomes the nearest float (it never wraps around, nor grows without bound).
Numeric literals are read in Java's syntax (section 3.8.1.1): hexadecimal
``0x1D`` and octal ``035`` exact literals, an ``L`` suffix, ``f``/``d`` on
approximate ones (``f`` rounds to a Java float).

The parser also builds the same expression as a tree of plain tuples
(:attr:`Selector.tree`), which the Rust core evaluates on encoded messages
(:meth:`Selector.native`); this module stays the reference for the semantics.

Nesting is limited to :data:`MAX_NESTING` levels. The recursive descent runs
on a list of generators rather than on Python's stack, so neither parsing a
deep selector nor refusing one depends on the current recursion limit.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import TypeAlias

from jmsstore._native import NativeSelector
from jmsstore.errors import InvalidArgumentError, JmsStoreError

__all__ = ["HEADER_IDENTIFIERS", "MAX_NESTING", "InvalidSelectorError", "Selector", "Tree"]


class InvalidSelectorError(JmsStoreError, ValueError):
    """A selector's text is not a valid JMS message selector.

    ``position`` is the 0-based offset in the text where the problem was found.
    """

    def __init__(self, message: str, text: str, position: int) -> None:
        where = f" (in {text!r})" if text else ""
        super().__init__(f"invalid selector at position {position}: {message}{where}")
        self.position = position
        self.text = text


# Header fields a selector may reference (JMS 2.0 §3.8.1.1); they are looked up
# in ``headers``, every other identifier in ``properties``.
HEADER_IDENTIFIERS = frozenset(
    {
        "JMSDeliveryMode",
        "JMSPriority",
        "JMSMessageID",
        "JMSTimestamp",
        "JMSCorrelationID",
        "JMSType",
        "JMSRedelivered",
        "JMSDeliveryTime",
        "JMSExpiration",
    }
)

# How deep a selector may nest: each pair of parentheses, each operator and
# each operand counts one level (a chain of AND, of OR, of + and -, or of *
# and / is one level however long). JMS providers accept deep but not
# unbounded nesting; 256 levels is far beyond hand-written selectors, keeps
# the closures' evaluation a few hundred Python frames deep at most, and
# matches the Rust core's limit on the compiled tree.
MAX_NESTING = 256

_KEYWORDS = frozenset({"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"})
_LONG_MIN = -(2**63)
_LONG_MAX = 2**63 - 1
_WHITESPACE = " \t\n\r\f"
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")

# Digits of the largest exact numeric literal (9223372036854775808, folded into -2^63).
_LONG_DIGITS = 19

Env = Mapping[str, object]
Fn = Callable[[Env, Env], object]
# The compiled expression as nested tuples of plain values (see Selector.tree).
Tree: TypeAlias = tuple[object, ...]


# ---------------------------------------------------------------- tokenizer


@dataclass(frozen=True)
class _Token:
    kind: str  # "str", "int", "float", "ident", "kw", "op", "eof"
    value: object
    pos: int


def _is_ident_start(ch: str) -> bool:
    return ch.isalpha() or ch in "_$"


def _is_ident_part(ch: str) -> bool:
    return ch.isalnum() or ch in "_$"


# Java's literal syntax (JMS 2.0 §3.8.1.1): exact literals in decimal, hexadecimal (0x1D) or octal (035),
# with an optional L; approximate literals with an optional f (rounded to a Java float) or d.
_NUMBER = re.compile(r"(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?([lLfFdD])?")
_HEX_NUMBER = re.compile(r"0[xX]([0-9a-fA-F]+)([lL])?")
_HEX_DIGITS, _OCTAL_DIGITS = 16, 22  # of a 64-bit pattern
_FLOAT32 = struct.Struct("<f")


def _number(text: str, i: int, fail: Callable[[str, int], InvalidSelectorError]) -> tuple[_Token, int]:
    """The numeric literal at ``text[i]`` and where it ends, in Java's syntax:
    a hexadecimal or octal literal is a 64-bit pattern, as a Java long's
    (``0xFFFFFFFFFFFFFFFFL`` is -1); ``f`` rounds to a Java float."""
    hexadecimal = _HEX_NUMBER.match(text, i)
    if hexadecimal is not None:
        digits = hexadecimal.group(1).lstrip("0") or "0"
        if len(digits) > _HEX_DIGITS:
            raise fail(f"hexadecimal literal {hexadecimal.group(0)} is wider than a Java long", i)
        return _Token("int", _as_long(int(digits, 16)), i), hexadecimal.end()
    m = _NUMBER.match(text, i)
    assert m is not None
    number, exponent, suffix = m.group(1), m.group(2), (m.group(3) or "").lower()
    literal = m.group(0)
    if "." in number or exponent or suffix in ("f", "d"):
        if suffix == "l":
            raise fail(f"malformed numeric literal {literal!r}: L marks an exact (integer) literal", i)
        value = float(literal.rstrip("fFdD"))
        if suffix == "f":
            try:
                value = _FLOAT32.unpack(_FLOAT32.pack(value))[0]
            except OverflowError:
                value = float("inf")
        if value in (float("inf"), float("-inf")):
            raise fail(f"approximate numeric literal {literal} out of range", i)
        return _Token("float", value, i), m.end()
    if len(number) > 1 and number.startswith("0"):
        if not all(d in "01234567" for d in number):
            raise fail(f"malformed octal literal {literal!r} (a leading 0 makes an octal literal)", i)
        significant = number.lstrip("0") or "0"
        if len(significant) > _OCTAL_DIGITS or int(significant, 8) >= 1 << 64:
            raise fail(f"octal literal {literal} is wider than a Java long", i)
        return _Token("int", _as_long(int(significant, 8)), i), m.end()
    # Refused before int(), which raises ValueError past 4300 digits.
    if len(number) > _LONG_DIGITS:
        raise fail(f"exact numeric literal of {len(number)} digits is outside the range of a Java long", i)
    return _Token("int", int(number), i), m.end()


def _as_long(pattern: int) -> int:
    """A 64-bit pattern as the Java long it is."""
    return pattern - (1 << 64) if pattern > _LONG_MAX else pattern


def _tokenize(text: str) -> list[_Token]:
    def fail(message: str, pos: int) -> InvalidSelectorError:
        return InvalidSelectorError(message, text, pos)

    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in _WHITESPACE:
            i += 1
        elif ch == "'":
            start, i, parts = i, i + 1, []
            while True:
                end = text.find("'", i)
                if end < 0:
                    raise fail("unterminated string literal", start)
                parts.append(text[i:end])
                if end + 1 < n and text[end + 1] == "'":  # '' is an escaped quote
                    parts.append("'")
                    i = end + 2
                else:
                    i = end + 1
                    break
            tokens.append(_Token("str", "".join(parts), start))
        elif ch.isdigit() or (ch == "." and i + 1 < n and text[i + 1].isdigit()):
            token, end = _number(text, i, fail)
            if end < n and (_is_ident_part(text[end]) or text[end] == "."):
                raise fail(f"malformed numeric literal {text[i : end + 1]!r}", i)
            tokens.append(token)
            i = end
        elif _is_ident_start(ch):
            start = i
            while i < n and _is_ident_part(text[i]):
                i += 1
            word = text[start:i]
            if word.upper() in _KEYWORDS:
                tokens.append(_Token("kw", word.upper(), start))
            else:
                tokens.append(_Token("ident", word, start))
        else:
            for op in _OPERATORS:
                if text.startswith(op, i):
                    tokens.append(_Token("op", op, i))
                    i += len(op)
                    break
            else:
                raise fail(f"unexpected character {ch!r}", i)
    tokens.append(_Token("eof", None, n))
    return tokens


# ---------------------------------------------------------------- evaluation helpers


def _is_num(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _truth(v: object) -> bool | None:
    """A value as a truth value: booleans are themselves, anything else is UNKNOWN."""
    return v if isinstance(v, bool) else None


def _compare(op: str, a: object, b: object) -> bool | None:
    if a is None or b is None:
        return None
    if _is_num(a) and _is_num(b):
        x, y = a, b
        assert isinstance(x, (int, float)) and isinstance(y, (int, float))
        if op == "=":
            return x == y
        if op == "<>":
            return x != y
        if op == "<":
            return x < y
        if op == "<=":
            return x <= y
        if op == ">":
            return x > y
        return x >= y
    # Strings and booleans compare only with their own type, and only by = and <>.
    if (isinstance(a, str) and isinstance(b, str)) or (isinstance(a, bool) and isinstance(b, bool)):
        if op == "=":
            return a == b
        if op == "<>":
            return a != b
    return None


def _long_or_double(value: int | float) -> int | float:
    """An integer result outside the range of a Java long becomes the nearest
    float: never a wrapped-around long, and never an integer larger than the
    Rust core can hold, so that both evaluate every selector alike."""
    if isinstance(value, int) and not _LONG_MIN <= value <= _LONG_MAX:
        try:
            return float(value)
        except OverflowError:  # only from ints beyond any long, passed in by a caller's dict
            return math.copysign(math.inf, value)
    return value


def _arith(op: str, a: object, b: object) -> object:
    if not (_is_num(a) and _is_num(b)):
        return None
    assert isinstance(a, (int, float)) and isinstance(b, (int, float))
    if op == "+":
        return _long_or_double(a + b)
    if op == "-":
        return _long_or_double(a - b)
    if op == "*":
        return _long_or_double(a * b)
    if b == 0:
        return None  # division by zero is NULL, never an exception
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)  # Java long division truncates toward zero
        return _long_or_double(q if (a < 0) == (b < 0) else -q)
    return a / b


def _like_regex(pattern: str, escape: str | None) -> re.Pattern[str] | None:
    """The regex for a LIKE pattern, or None when an escape is misused."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape:
            if i + 1 >= len(pattern) or pattern[i + 1] not in ("%", "_", escape):
                return None
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if ch == "%":
            out.append(".*")
        elif ch == "_":
            out.append(".")
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


# ---------------------------------------------------------------- parser

# Static types, used to reject ill-typed selectors at parse time.
_BOOL, _NUM, _STR, _ANY = "boolean", "numeric", "string", "any"


@dataclass(frozen=True)
class _Node:
    fn: Fn
    type: str
    pos: int
    tree: Tree
    depth: int  # nesting levels, this node's included (see MAX_NESTING)
    ident: str | None = None  # set when the node is a bare identifier


# A grammar rule: a generator that yields the rules it needs parsed (and is
# sent their nodes back) and returns its own node. _drive runs them.
_Parse: TypeAlias = Generator["_Parse", _Node, _Node]


def _drive(rule: _Parse) -> _Node:
    """Runs ``rule`` and every rule it yields on a list instead of Python's
    stack: how deep a selector nests never reaches the recursion limit."""
    pending: list[_Parse] = [rule]
    result: _Node | None = None
    while True:
        current = pending[-1]
        try:
            needed = next(current) if result is None else current.send(result)
        except StopIteration as done:
            pending.pop()
            if not pending:
                node: _Node = done.value
                return node
            result = done.value
            continue
        pending.append(needed)
        result = None


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.identifiers: set[str] = set()
        self.open = 0  # parentheses, NOT and unary signs around the current token

    # -- token helpers
    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def advance(self) -> _Token:
        t = self.tokens[self.i]
        self.i += 1
        return t

    def at(self, kind: str, value: object = None) -> bool:
        t = self.tok
        return t.kind == kind and (value is None or t.value == value)

    def accept(self, kind: str, value: object = None) -> _Token | None:
        return self.advance() if self.at(kind, value) else None

    def fail(self, message: str, pos: int | None = None) -> InvalidSelectorError:
        return InvalidSelectorError(message, self.text, self.tok.pos if pos is None else pos)

    def describe(self) -> str:
        t = self.tok
        if t.kind == "eof":
            return "end of selector"
        if t.kind == "str":
            return f"string literal {t.value!r}"
        return repr(str(t.value))

    def expect(self, kind: str, value: object, what: str) -> _Token:
        t = self.accept(kind, value)
        if t is None:
            raise self.fail(f"expected {what}, found {self.describe()}")
        return t

    def check(self, node: _Node, allowed: tuple[str, ...], context: str) -> None:
        if node.type != _ANY and node.type not in allowed:
            raise self.fail(f"{context} needs a {' or '.join(allowed)} operand, not a {node.type} one", node.pos)

    # -- nesting
    def too_deep(self, pos: int) -> InvalidSelectorError:
        return self.fail(f"the selector nests more than {MAX_NESTING} levels deep", pos)

    def enter(self, pos: int) -> None:
        """Opens a parenthesis, NOT or sign: what it holds is at least one level deeper."""
        self.open += 1
        if self.open >= MAX_NESTING:
            raise self.too_deep(pos)

    def node(self, fn: Fn, type_: str, pos: int, tree: Tree, *operands: _Node) -> _Node:
        depth = 1 + max((operand.depth for operand in operands), default=0)
        if depth > MAX_NESTING:
            raise self.too_deep(pos)
        return _Node(fn, type_, pos, tree, depth)

    # -- grammar
    def parse(self) -> _Node:
        node = _drive(self.or_expr())
        if not self.at("eof"):
            raise self.fail(f"unexpected {self.describe()} after the end of the expression")
        self.check(node, (_BOOL,), "a selector")
        return node

    def or_expr(self) -> _Parse:
        first: _Node = yield self.and_expr()
        operands = [first]
        pos = first.pos
        while t := self.accept("kw", "OR"):
            right: _Node = yield self.and_expr()
            if len(operands) == 1:
                self.check(first, (_BOOL,), "OR")
            self.check(right, (_BOOL,), "OR")
            operands.append(right)
            pos = t.pos
        if len(operands) == 1:
            return first
        tree = ("or", *(operand.tree for operand in operands))
        return self.node(_or(tuple(operand.fn for operand in operands)), _BOOL, pos, tree, *operands)

    def and_expr(self) -> _Parse:
        first: _Node = yield self.not_expr()
        operands = [first]
        pos = first.pos
        while t := self.accept("kw", "AND"):
            right: _Node = yield self.not_expr()
            if len(operands) == 1:
                self.check(first, (_BOOL,), "AND")
            self.check(right, (_BOOL,), "AND")
            operands.append(right)
            pos = t.pos
        if len(operands) == 1:
            return first
        tree = ("and", *(operand.tree for operand in operands))
        return self.node(_and(tuple(operand.fn for operand in operands)), _BOOL, pos, tree, *operands)

    def not_expr(self) -> _Parse:
        if t := self.accept("kw", "NOT"):
            self.enter(t.pos)
            operand: _Node = yield self.not_expr()
            self.open -= 1
            self.check(operand, (_BOOL,), "NOT")
            return self.node(_not(operand.fn), _BOOL, t.pos, ("not", operand.tree), operand)
        node: _Node = yield self.comparison()
        return node

    def comparison(self) -> _Parse:
        left: _Node = yield self.additive()
        t = self.tok
        if t.kind == "op" and t.value in ("=", "<>", "<", "<=", ">", ">="):
            self.advance()
            op = str(t.value)
            right: _Node = yield self.additive()
            types = {left.type, right.type} - {_ANY}
            if len(types) > 1:
                raise self.fail(f"cannot compare a {left.type} with a {right.type}", t.pos)
            if op not in ("=", "<>") and types & {_STR, _BOOL}:
                raise self.fail(f"{types.pop()} values support only = and <>, not {op}", t.pos)
            return self.node(_cmp(op, left.fn, right.fn), _BOOL, t.pos, ("cmp", op, left.tree, right.tree), left, right)
        negated = False
        if t.kind == "kw" and t.value == "NOT":
            nxt = self.tokens[self.i + 1]
            if not (nxt.kind == "kw" and nxt.value in ("BETWEEN", "IN", "LIKE")):
                raise self.fail("expected BETWEEN, IN or LIKE after NOT")
            self.advance()
            negated = True
        if self.accept("kw", "BETWEEN"):
            node: _Node = yield self.between(left, negated, t.pos)
            return node
        if self.accept("kw", "IN"):
            return self.in_list(left, negated, t.pos)
        if self.accept("kw", "LIKE"):
            return self.like(left, negated, t.pos)
        if self.accept("kw", "IS"):
            return self.is_null(left, t.pos)
        return left

    def require_identifier(self, node: _Node, construct: str) -> str:
        if node.ident is None:
            raise self.fail(f"the left operand of {construct} must be an identifier", node.pos)
        return node.ident

    def between(self, left: _Node, negated: bool, pos: int) -> _Parse:
        low: _Node = yield self.additive()
        self.expect("kw", "AND", "AND in BETWEEN")
        high: _Node = yield self.additive()
        for node in (left, low, high):
            self.check(node, (_NUM,), "BETWEEN")
        value, lo, hi = left.fn, low.fn, high.fn

        # x BETWEEN a AND b  ==  a <= x AND x <= b  (JMS 2.0 §3.8.1.2)
        def between(h: Env, p: Env) -> object:
            v = value(h, p)
            return _and3(_compare("<=", lo(h, p), v), _compare("<=", v, hi(h, p)))

        tree = ("between", left.tree, low.tree, high.tree, negated)
        return self.node(_not(between) if negated else between, _BOOL, pos, tree, left, low, high)

    def in_list(self, left: _Node, negated: bool, pos: int) -> _Node:
        self.require_identifier(left, "IN")
        self.expect("op", "(", "( after IN")
        items: dict[str, None] = {}  # a set that keeps the order of the text
        while True:
            t = self.accept("str")
            if t is None:
                raise self.fail(f"IN lists hold string literals only, found {self.describe()}")
            assert isinstance(t.value, str)
            items[t.value] = None
            if self.accept("op", ")"):
                break
            self.expect("op", ",", ", or ) in the IN list")
        self.check(left, (_STR,), "IN")
        values = frozenset(items)
        get = left.fn

        def member(h: Env, p: Env) -> object:
            v = get(h, p)
            if not isinstance(v, str):
                return None
            return (v not in values) if negated else (v in values)

        return self.node(member, _BOOL, pos, ("in", left.tree, tuple(items), negated), left)

    def like(self, left: _Node, negated: bool, pos: int) -> _Node:
        self.require_identifier(left, "LIKE")
        pattern_tok = self.accept("str")
        if pattern_tok is None:
            raise self.fail(f"LIKE needs a string literal pattern, found {self.describe()}")
        escape: str | None = None
        if self.accept("kw", "ESCAPE"):
            esc_tok = self.accept("str")
            if esc_tok is None:
                raise self.fail(f"ESCAPE needs a string literal, found {self.describe()}")
            assert isinstance(esc_tok.value, str)
            if len(esc_tok.value) != 1:
                raise self.fail(f"the ESCAPE character must be a single character, got {esc_tok.value!r}", esc_tok.pos)
            escape = esc_tok.value
        self.check(left, (_STR,), "LIKE")
        assert isinstance(pattern_tok.value, str)
        regex = _like_regex(pattern_tok.value, escape)
        if regex is None:
            raise self.fail(
                f"in LIKE pattern {pattern_tok.value!r} the escape character must precede %, _ or itself",
                pattern_tok.pos,
            )
        get, fullmatch = left.fn, regex.fullmatch

        def like(h: Env, p: Env) -> object:
            v = get(h, p)
            if not isinstance(v, str):
                return None
            return (fullmatch(v) is None) if negated else (fullmatch(v) is not None)

        return self.node(like, _BOOL, pos, ("like", left.tree, pattern_tok.value, escape, negated), left)

    def is_null(self, left: _Node, pos: int) -> _Node:
        self.require_identifier(left, "IS NULL")
        negated = self.accept("kw", "NOT") is not None
        self.expect("kw", "NULL", "NULL after IS" + (" NOT" if negated else ""))
        get = left.fn
        tree = ("is_null", left.tree, negated)
        if negated:
            return self.node(lambda h, p: get(h, p) is not None, _BOOL, pos, tree, left)
        return self.node(lambda h, p: get(h, p) is None, _BOOL, pos, tree, left)

    def additive(self) -> _Parse:
        node: _Node = yield self.arithmetic(("+", "-"), self.multiplicative)
        return node

    def multiplicative(self) -> _Parse:
        node: _Node = yield self.arithmetic(("*", "/"), self.unary)
        return node

    def arithmetic(self, ops: tuple[str, ...], operand: Callable[[], _Parse]) -> _Parse:
        """A left-associative chain of ``ops`` between operands: one node."""
        first: _Node = yield operand()
        operands = [first]
        steps: list[tuple[str, Fn]] = []
        tree: list[object] = ["arith", first.tree]
        pos = first.pos
        while self.tok.kind == "op" and self.tok.value in ops:
            t = self.advance()
            op = str(t.value)
            right: _Node = yield operand()
            if not steps:
                self.check(first, (_NUM,), f"arithmetic {op}")
            self.check(right, (_NUM,), f"arithmetic {op}")
            operands.append(right)
            steps.append((op, right.fn))
            tree.append((op, right.tree))
            pos = t.pos
        if not steps:
            return first
        return self.node(_arith_chain(first.fn, tuple(steps)), _NUM, pos, tuple(tree), *operands)

    def unary(self) -> _Parse:
        t = self.tok
        if t.kind == "op" and t.value in ("+", "-"):
            self.advance()
            nxt = self.tok
            if t.value == "-" and nxt.kind == "int":  # fold, so that -9223372036854775808 is in range
                self.advance()
                assert isinstance(nxt.value, int)
                return self.int_literal(-nxt.value, t.pos)
            self.enter(t.pos)
            operand: _Node = yield self.unary()
            self.open -= 1
            self.check(operand, (_NUM,), f"unary {t.value}")
            fn = operand.fn
            if t.value == "+":

                def plus(h: Env, p: Env) -> object:
                    v = fn(h, p)
                    return v if _is_num(v) else None

                return self.node(plus, _NUM, t.pos, ("pos", operand.tree), operand)

            def negate(h: Env, p: Env) -> object:
                v = fn(h, p)
                if not _is_num(v):
                    return None
                assert isinstance(v, (int, float))
                return _long_or_double(-v)

            return self.node(negate, _NUM, t.pos, ("neg", operand.tree), operand)
        node: _Node = yield self.primary()
        return node

    def int_literal(self, value: int, pos: int) -> _Node:
        if not _LONG_MIN <= value <= _LONG_MAX:
            raise self.fail(f"exact numeric literal {value} is outside the range of a Java long", pos)
        return self.node(_const(value), _NUM, pos, ("lit", value))

    def primary(self) -> _Parse:
        t = self.tok
        if t.kind == "int":
            self.advance()
            assert isinstance(t.value, int)
            return self.int_literal(t.value, t.pos)
        if t.kind == "float":
            self.advance()
            return self.node(_const(t.value), _NUM, t.pos, ("lit", t.value))
        if t.kind == "str":
            self.advance()
            return self.node(_const(t.value), _STR, t.pos, ("lit", t.value))
        if t.kind == "kw" and t.value in ("TRUE", "FALSE"):
            self.advance()
            value = t.value == "TRUE"
            return self.node(_const(value), _BOOL, t.pos, ("lit", value))
        if t.kind == "ident":
            self.advance()
            name = str(t.value)
            self.identifiers.add(name)
            tree = ("header" if name in HEADER_IDENTIFIERS else "prop", name)
            return _Node(_lookup(name), _ANY, t.pos, tree, 1, ident=name)
        if self.accept("op", "("):
            self.enter(t.pos)
            node: _Node = yield self.or_expr()
            self.expect("op", ")", ")")
            self.open -= 1
            # The parentheses are a level of their own, though they add nothing to the tree.
            if node.depth + 1 > MAX_NESTING:
                raise self.too_deep(t.pos)
            return _Node(node.fn, node.type, t.pos, node.tree, node.depth + 1)
        if t.kind == "kw" and t.value == "NULL":
            raise self.fail("NULL may only appear in IS [NOT] NULL")
        if t.kind == "kw":
            raise self.fail(f"reserved word {t.value} cannot be used here (nor as an identifier)")
        raise self.fail(f"expected an operand, found {self.describe()}")


# ---------------------------------------------------------------- closure builders


def _const(value: object) -> Fn:
    return lambda h, p: value


def _lookup(name: str) -> Fn:
    if name in HEADER_IDENTIFIERS:
        return lambda h, p: h.get(name)
    return lambda h, p: p.get(name)


def _cmp(op: str, left: Fn, right: Fn) -> Fn:
    return lambda h, p: _compare(op, left(h, p), right(h, p))


def _arith_chain(first: Fn, steps: tuple[tuple[str, Fn], ...]) -> Fn:
    """``first op1 e1 op2 e2 ...`` applied left to right."""
    if len(steps) == 1:
        ((op, right),) = steps
        return lambda h, p: _arith(op, first(h, p), right(h, p))

    def chain(h: Env, p: Env) -> object:
        value = first(h, p)
        for op, fn in steps:
            value = _arith(op, value, fn(h, p))
        return value

    return chain


def _and3(a: object, b: object) -> bool | None:
    x, y = _truth(a), _truth(b)
    if x is False or y is False:
        return False
    if x is True and y is True:
        return True
    return None


def _and(operands: tuple[Fn, ...]) -> Fn:
    """``a AND b AND ...``: FALSE if any operand is, else UNKNOWN if any is."""
    if len(operands) == 2:
        left, right = operands

        def conj(h: Env, p: Env) -> object:
            x = _truth(left(h, p))
            if x is False:
                return False
            return _and3(x, right(h, p))

        return conj

    def conj_n(h: Env, p: Env) -> object:
        result: bool | None = True
        for fn in operands:
            x = _truth(fn(h, p))
            if x is False:
                return False
            if x is None:
                result = None
        return result

    return conj_n


def _or(operands: tuple[Fn, ...]) -> Fn:
    """``a OR b OR ...``: TRUE if any operand is, else UNKNOWN if any is."""
    if len(operands) == 2:
        left, right = operands

        def disj(h: Env, p: Env) -> object:
            x = _truth(left(h, p))
            if x is True:
                return True
            y = _truth(right(h, p))
            if y is True:
                return True
            if x is False and y is False:
                return False
            return None

        return disj

    def disj_n(h: Env, p: Env) -> object:
        result: bool | None = False
        for fn in operands:
            x = _truth(fn(h, p))
            if x is True:
                return True
            if x is None:
                result = None
        return result

    return disj_n


def _not(operand: Fn) -> Fn:
    def neg(h: Env, p: Env) -> object:
        x = _truth(operand(h, p))
        return None if x is None else not x

    return neg


# ---------------------------------------------------------------- public API

_SELECT_ALL: Tree = ("lit", True)


class Selector:
    """A parsed JMS message selector.

    An empty (or blank) selector, or ``None``, selects every message.
    Raises :class:`InvalidSelectorError` for any syntax or type error, for
    nesting deeper than :data:`MAX_NESTING` levels, and for a ``text`` that
    is neither a str nor None.
    """

    __slots__ = ("_fn", "_identifiers", "_native", "_text", "_tree")

    def __init__(self, text: str | None) -> None:
        if text is not None and not isinstance(text, str):
            raise InvalidSelectorError(f"a selector is a str or None, not {type(text).__name__}", "", 0)
        self._text = "" if text is None else text
        self._fn: Fn | None
        self._native: NativeSelector | None = None
        if self._text.strip(_WHITESPACE) == "":
            self._fn = None
            self._tree = _SELECT_ALL
            self._identifiers: frozenset[str] = frozenset()
            return
        parser = _Parser(self._text)
        node = parser.parse()
        self._fn = node.fn
        self._tree = node.tree
        self._identifiers = frozenset(parser.identifiers)

    @property
    def text(self) -> str:
        return self._text

    @property
    def identifiers(self) -> frozenset[str]:
        """The header and property names the selector references."""
        return self._identifiers

    @property
    def tree(self) -> Tree:
        """The compiled expression as nested tuples of plain values, for
        evaluators outside Python (:meth:`native`). Each node is a tuple
        whose first item names it:

        - ``("lit", v)``: a literal; ``v`` is a bool, an int in the range of a
          Java long, a finite float or a str;
        - ``("header", name)``: one of :data:`HEADER_IDENTIFIERS`;
          ``("prop", name)``: a property;
        - ``("and", e1, e2, ...)``, ``("or", e1, e2, ...)``: two or more
          operands; ``("not", e)``;
        - ``("cmp", op, a, b)``: ``op`` is ``=``, ``<>``, ``<``, ``<=``, ``>``
          or ``>=``;
        - ``("arith", e0, (op1, e1), (op2, e2), ...)``: ``op`` is ``+``, ``-``,
          ``*`` or ``/``, applied left to right;
        - ``("neg", e)``, ``("pos", e)``: unary minus and plus;
        - ``("between", e, low, high, negated)``;
        - ``("in", e, (s1, s2, ...), negated)``: the strings in the order the
          selector lists them, without repeats;
        - ``("like", e, pattern, escape, negated)``: ``escape`` is a
          one-character str or None;
        - ``("is_null", e, negated)``.

        ``negated`` is a bool (the ``NOT`` forms). An empty selector's tree
        is ``("lit", True)``. Parentheses leave no node; the tree is at most
        :data:`MAX_NESTING` nodes deep.
        """
        return self._tree

    def native(self) -> NativeSelector:
        """The selector compiled for the Rust core (made once, then cached):
        it evaluates exactly as :meth:`evaluate` does, on dicts or on an
        encoded message. A selector whose string literals are not valid
        Unicode (lone surrogates) cannot be compiled: it raises
        :class:`InvalidSelectorError` (the broker evaluates every consumer's
        and subscription's selector natively, so it refuses such a selector)."""
        compiled = self._native
        if compiled is None:
            try:
                compiled = self._native = NativeSelector(self._tree)
            except InvalidArgumentError as e:
                # Only a string literal holding a lone surrogate gets here:
                # the core compares strings as Unicode text.
                raise InvalidSelectorError(f"a string literal is not valid Unicode text ({e})", self._text, 0) from None
        return compiled

    def evaluate(self, headers: Mapping[str, object], properties: Mapping[str, object]) -> bool | None:
        """The three-valued result: True, False, or None for UNKNOWN."""
        if self._fn is None:
            return True
        return _truth(self._fn(headers, properties))

    def matches(self, headers: Mapping[str, object], properties: Mapping[str, object]) -> bool:
        """True only when the selector evaluates to TRUE (FALSE and UNKNOWN reject)."""
        return self.evaluate(headers, properties) is True

    def __repr__(self) -> str:
        return f"Selector({self._text!r})"
