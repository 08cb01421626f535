"""JMS message selectors (JMS 2.0 specification, section 3.8.1).

A selector is a boolean expression over a message's header fields and
properties, written in a subset of SQL92 conditional expression syntax::

    sel = Selector("color = 'red' AND weight BETWEEN 10 AND 20")
    sel.matches(headers, properties)  # True only when the expression is TRUE

The text is tokenized and parsed by hand (recursive descent) once, at
construction, into a tree of Python closures; evaluation runs the closures.
Evaluation follows SQL three-valued logic: ``None`` stands for both NULL and
UNKNOWN, and a message is selected only when the result is ``True``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from jmsstore.errors import JmsStoreError

__all__ = ["HEADER_IDENTIFIERS", "InvalidSelectorError", "Selector"]


class InvalidSelectorError(JmsStoreError, ValueError):
    """A selector's text is not a valid JMS message selector.

    ``position`` is the 0-based offset in the text where the problem was found.
    """

    def __init__(self, message: str, text: str, position: int) -> None:
        super().__init__(f"invalid selector at position {position}: {message} (in {text!r})")
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

_KEYWORDS = frozenset({"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"})
_LONG_MIN = -(2**63)
_LONG_MAX = 2**63 - 1
_WHITESPACE = " \t\n\r\f"
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")

Env = Mapping[str, object]
Fn = Callable[[Env, Env], object]


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


_NUMBER = re.compile(r"(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


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
            m = _NUMBER.match(text, i)
            assert m is not None
            literal = m.group(0)
            end = m.end()
            if end < n and (_is_ident_part(text[end]) or text[end] == "."):
                raise fail(f"malformed numeric literal {text[i : end + 1]!r}", i)
            if "." in literal or m.group(2):
                value = float(literal)
                if value in (float("inf"), float("-inf")):
                    raise fail(f"approximate numeric literal {literal} out of range", i)
                tokens.append(_Token("float", value, i))
            else:
                tokens.append(_Token("int", int(literal), i))
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


def _arith(op: str, a: object, b: object) -> object:
    if not (_is_num(a) and _is_num(b)):
        return None
    assert isinstance(a, (int, float)) and isinstance(b, (int, float))
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        return None  # division by zero is NULL, never an exception
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)  # Java long division truncates toward zero
        return q if (a < 0) == (b < 0) else -q
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
    ident: str | None = None  # set when the node is a bare identifier


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0
        self.identifiers: set[str] = set()

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

    # -- grammar
    def parse(self) -> _Node:
        node = self.or_expr()
        if not self.at("eof"):
            raise self.fail(f"unexpected {self.describe()} after the end of the expression")
        self.check(node, (_BOOL,), "a selector")
        return node

    def or_expr(self) -> _Node:
        left = self.and_expr()
        while t := self.accept("kw", "OR"):
            right = self.and_expr()
            self.check(left, (_BOOL,), "OR")
            self.check(right, (_BOOL,), "OR")
            left = _Node(_or(left.fn, right.fn), _BOOL, t.pos)
        return left

    def and_expr(self) -> _Node:
        left = self.not_expr()
        while t := self.accept("kw", "AND"):
            right = self.not_expr()
            self.check(left, (_BOOL,), "AND")
            self.check(right, (_BOOL,), "AND")
            left = _Node(_and(left.fn, right.fn), _BOOL, t.pos)
        return left

    def not_expr(self) -> _Node:
        if t := self.accept("kw", "NOT"):
            operand = self.not_expr()
            self.check(operand, (_BOOL,), "NOT")
            return _Node(_not(operand.fn), _BOOL, t.pos)
        return self.comparison()

    def comparison(self) -> _Node:
        left = self.additive()
        t = self.tok
        if t.kind == "op" and t.value in ("=", "<>", "<", "<=", ">", ">="):
            self.advance()
            op = str(t.value)
            right = self.additive()
            types = {left.type, right.type} - {_ANY}
            if len(types) > 1:
                raise self.fail(f"cannot compare a {left.type} with a {right.type}", t.pos)
            if op not in ("=", "<>") and types & {_STR, _BOOL}:
                raise self.fail(f"{types.pop()} values support only = and <>, not {op}", t.pos)
            return _Node(_cmp(op, left.fn, right.fn), _BOOL, t.pos)
        negated = False
        if t.kind == "kw" and t.value == "NOT":
            nxt = self.tokens[self.i + 1]
            if not (nxt.kind == "kw" and nxt.value in ("BETWEEN", "IN", "LIKE")):
                raise self.fail("expected BETWEEN, IN or LIKE after NOT")
            self.advance()
            negated = True
        if self.accept("kw", "BETWEEN"):
            return self.between(left, negated, t.pos)
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

    def between(self, left: _Node, negated: bool, pos: int) -> _Node:
        low = self.additive()
        self.expect("kw", "AND", "AND in BETWEEN")
        high = self.additive()
        for node in (left, low, high):
            self.check(node, (_NUM,), "BETWEEN")
        value, lo, hi = left.fn, low.fn, high.fn

        # x BETWEEN a AND b  ==  a <= x AND x <= b  (JMS 2.0 §3.8.1.2)
        def between(h: Env, p: Env) -> object:
            v = value(h, p)
            return _and3(_compare("<=", lo(h, p), v), _compare("<=", v, hi(h, p)))

        return _Node(_not(between) if negated else between, _BOOL, pos)

    def in_list(self, left: _Node, negated: bool, pos: int) -> _Node:
        self.require_identifier(left, "IN")
        self.expect("op", "(", "( after IN")
        items: set[str] = set()
        while True:
            t = self.accept("str")
            if t is None:
                raise self.fail(f"IN lists hold string literals only, found {self.describe()}")
            assert isinstance(t.value, str)
            items.add(t.value)
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

        return _Node(member, _BOOL, pos)

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

        return _Node(like, _BOOL, pos)

    def is_null(self, left: _Node, pos: int) -> _Node:
        self.require_identifier(left, "IS NULL")
        negated = self.accept("kw", "NOT") is not None
        self.expect("kw", "NULL", "NULL after IS" + (" NOT" if negated else ""))
        get = left.fn
        if negated:
            return _Node(lambda h, p: get(h, p) is not None, _BOOL, pos)
        return _Node(lambda h, p: get(h, p) is None, _BOOL, pos)

    def additive(self) -> _Node:
        left = self.multiplicative()
        while self.tok.kind == "op" and self.tok.value in ("+", "-"):
            t = self.advance()
            right = self.multiplicative()
            self.arith_check(left, right, str(t.value))
            left = _Node(_arith_fn(str(t.value), left.fn, right.fn), _NUM, t.pos)
        return left

    def multiplicative(self) -> _Node:
        left = self.unary()
        while self.tok.kind == "op" and self.tok.value in ("*", "/"):
            t = self.advance()
            right = self.unary()
            self.arith_check(left, right, str(t.value))
            left = _Node(_arith_fn(str(t.value), left.fn, right.fn), _NUM, t.pos)
        return left

    def arith_check(self, left: _Node, right: _Node, op: str) -> None:
        self.check(left, (_NUM,), f"arithmetic {op}")
        self.check(right, (_NUM,), f"arithmetic {op}")

    def unary(self) -> _Node:
        t = self.tok
        if t.kind == "op" and t.value in ("+", "-"):
            self.advance()
            nxt = self.tok
            if t.value == "-" and nxt.kind == "int":  # fold, so that -9223372036854775808 is in range
                self.advance()
                assert isinstance(nxt.value, int)
                return self.int_literal(-nxt.value, t.pos)
            operand = self.unary()
            self.check(operand, (_NUM,), f"unary {t.value}")
            fn = operand.fn
            if t.value == "+":
                return _Node(lambda h, p: fn(h, p) if _is_num(fn(h, p)) else None, _NUM, t.pos)

            def negate(h: Env, p: Env) -> object:
                v = fn(h, p)
                if not _is_num(v):
                    return None
                assert isinstance(v, (int, float))
                return -v

            return _Node(negate, _NUM, t.pos)
        return self.primary()

    def int_literal(self, value: int, pos: int) -> _Node:
        if not _LONG_MIN <= value <= _LONG_MAX:
            raise self.fail(f"exact numeric literal {value} is outside the range of a Java long", pos)
        return _Node(_const(value), _NUM, pos)

    def primary(self) -> _Node:
        t = self.tok
        if t.kind == "int":
            self.advance()
            assert isinstance(t.value, int)
            return self.int_literal(t.value, t.pos)
        if t.kind == "float":
            self.advance()
            return _Node(_const(t.value), _NUM, t.pos)
        if t.kind == "str":
            self.advance()
            return _Node(_const(t.value), _STR, t.pos)
        if t.kind == "kw" and t.value in ("TRUE", "FALSE"):
            self.advance()
            return _Node(_const(t.value == "TRUE"), _BOOL, t.pos)
        if t.kind == "ident":
            self.advance()
            name = str(t.value)
            self.identifiers.add(name)
            return _Node(_lookup(name), _ANY, t.pos, ident=name)
        if self.accept("op", "("):
            node = self.or_expr()
            self.expect("op", ")", ")")
            return _Node(node.fn, node.type, t.pos)
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


def _arith_fn(op: str, left: Fn, right: Fn) -> Fn:
    return lambda h, p: _arith(op, left(h, p), right(h, p))


def _and3(a: object, b: object) -> bool | None:
    x, y = _truth(a), _truth(b)
    if x is False or y is False:
        return False
    if x is True and y is True:
        return True
    return None


def _and(left: Fn, right: Fn) -> Fn:
    def conj(h: Env, p: Env) -> object:
        x = _truth(left(h, p))
        if x is False:
            return False
        return _and3(x, right(h, p))

    return conj


def _or(left: Fn, right: Fn) -> Fn:
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


def _not(operand: Fn) -> Fn:
    def neg(h: Env, p: Env) -> object:
        x = _truth(operand(h, p))
        return None if x is None else not x

    return neg


# ---------------------------------------------------------------- public API


class Selector:
    """A parsed JMS message selector.

    An empty (or blank) selector, or ``None``, selects every message.
    Raises :class:`InvalidSelectorError` for any syntax or type error.
    """

    __slots__ = ("_fn", "_identifiers", "_text")

    def __init__(self, text: str | None) -> None:
        self._text = "" if text is None else text
        self._fn: Fn | None
        if self._text.strip(_WHITESPACE) == "":
            self._fn = None
            self._identifiers: frozenset[str] = frozenset()
            return
        parser = _Parser(self._text)
        self._fn = parser.parse().fn
        self._identifiers = frozenset(parser.identifiers)

    @property
    def text(self) -> str:
        return self._text

    @property
    def identifiers(self) -> frozenset[str]:
        """The header and property names the selector references."""
        return self._identifiers

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
