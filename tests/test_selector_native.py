"""The native selector (``jmsstore._native.NativeSelector``, the Rust core's
``broker::selector``) against the Python reference (``jmsstore.selector``).

Hypothesis generates well-typed selectors and headers and properties of every
type the message format holds, and checks that the Rust core evaluates each
exactly as Python does: on dicts, and on the encoded message (through the
core's zero-copy view) against Python on the decoded message. Set
``JMSSTORE_LONG=1`` for 5,000 examples instead of 200.
"""

from __future__ import annotations

import math
import os
import struct

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from jmsstore._native import CorruptionError, InvalidArgumentError, NativeSelector
from jmsstore.jms.message import DeliveryMode, TextMessage, decode, encode
from jmsstore.selector import HEADER_IDENTIFIERS, MAX_NESTING, Selector

LONG = bool(os.environ.get("JMSSTORE_LONG"))
EXAMPLES = 5000 if LONG else 200
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

# ---------------------------------------------------------------- the API


def test_native_is_compiled_once_and_reports_what_it_reads() -> None:
    s = Selector("color = 'red' AND weight > 10")
    native = s.native()
    assert s.native() is native
    assert native.identifiers == ["color", "weight"]
    assert not native.needs_only_pager_header
    assert native.depth == 3
    assert Selector("JMSPriority > 3 AND JMSRedelivered = FALSE").native().needs_only_pager_header
    assert not Selector("JMSDeliveryMode = 'PERSISTENT'").native().needs_only_pager_header
    assert not Selector("JMSMessageID IS NULL").native().needs_only_pager_header
    assert "weight" in repr(native)


def test_empty_selector_selects_everything_natively() -> None:
    for text in (None, "", "  "):
        s = Selector(text)
        assert s.tree == ("lit", True)
        assert s.native().matches({}, {})
        assert s.native().matches_message(encode(TextMessage("x")), 0)


def test_tree_format() -> None:
    s = Selector(
        "NOT (a + 1 * -b - 2 > 3.5) AND s NOT LIKE 'x!%%' ESCAPE '!' AND t IN ('u', 'v', 'u') "
        "OR c NOT BETWEEN -1 AND +d OR JMSType IS NOT NULL OR f"
    )
    a_term = ("arith", ("prop", "a"), ("+", ("arith", ("lit", 1), ("*", ("neg", ("prop", "b"))))), ("-", ("lit", 2)))
    assert s.tree == (
        "or",
        (
            "and",
            ("not", ("cmp", ">", a_term, ("lit", 3.5))),
            ("like", ("prop", "s"), "x!%%", "!", True),
            ("in", ("prop", "t"), ("u", "v"), False),
        ),
        ("between", ("prop", "c"), ("lit", -1), ("pos", ("prop", "d")), True),
        ("is_null", ("header", "JMSType"), True),
        ("prop", "f"),
    )
    assert NativeSelector(s.tree).identifiers == ["a", "b", "s", "t", "c", "d", "JMSType", "f"]


@pytest.mark.parametrize(
    "tree",
    [
        [],
        (),
        "lit",
        ("lit",),
        ("lit", True, False),
        ("lit", b"x"),
        ("lit", None),
        ("lit", 2**63),
        ("lit", "\ud800"),
        (1, 2),
        ("nope", ("lit", True)),
        ("header", "JMSFoo"),
        ("header", 1),
        ("prop", None),
        ("not",),
        ("and",),
        ("or",),
        ("and", ["lit", True]),
        ("cmp", "==", ("lit", 1), ("lit", 1)),
        ("cmp", "=", ("lit", 1)),
        ("arith",),
        ("arith", ("lit", 1), ("%", ("lit", 2))),
        ("arith", ("lit", 1), ("+",)),
        ("arith", ("lit", 1), "+"),
        ("between", ("prop", "x"), ("lit", 1), ("lit", 2), 0),
        ("in", ("prop", "x"), ["a"], False),
        ("in", ("prop", "x"), ("a", 1), False),
        ("like", ("prop", "x"), "a", "ab", False),
        ("like", ("prop", "x"), "a!", "!", False),
        ("like", ("prop", "x"), 1, None, False),
        ("is_null", ("prop", "x"), None),
        ("neg", ("lit", 1), ("lit", 2)),
    ],
)
def test_malformed_trees_are_typed_errors(tree: object) -> None:
    with pytest.raises(InvalidArgumentError):
        NativeSelector(tree)  # type: ignore[arg-type]


def nested_not(levels: int) -> tuple[object, ...]:
    tree: tuple[object, ...] = ("lit", True)
    for _ in range(levels):
        tree = ("not", tree)
    return tree


def test_tree_depth_is_bounded() -> None:
    assert NativeSelector(nested_not(MAX_NESTING - 1)).depth == MAX_NESTING
    with pytest.raises(InvalidArgumentError, match="levels deep"):
        NativeSelector(nested_not(MAX_NESTING))
    with pytest.raises(InvalidArgumentError, match="levels deep"):
        NativeSelector(nested_not(100_000))


@pytest.mark.parametrize(
    "text",
    [
        "NOT " * (MAX_NESTING - 1) + "TRUE",
        "(" * (MAX_NESTING - 1) + "TRUE" + ")" * (MAX_NESTING - 1),
        "(" * (MAX_NESTING - 2) + "x = 1" + ")" * (MAX_NESTING - 2),
        "- " * (MAX_NESTING - 2) + "x = 1",
        " AND ".join(f"(x = {i} OR y <> {i})" for i in range(2000)),
        " + ".join(["x"] * 5000) + " > 0",
    ],
)
def test_deepest_and_longest_selectors_agree(text: str) -> None:
    s = Selector(text)
    for props in ({"x": 1, "y": 2}, {"x": -1}, {}):
        assert s.native().evaluate({}, props) is s.evaluate({}, props)


def test_malformed_messages_raise_corruption_error() -> None:
    native = Selector("color = 'red'").native()
    data = encode(TextMessage("x"))
    for bad in (b"", b"\x02" + data[1:], data[:20], data[:40]):
        with pytest.raises(CorruptionError, match="malformed message"):
            native.matches_message(bad, 0)


def test_non_python_property_values_are_not_null_and_not_comparable() -> None:
    native = Selector("x IS NOT NULL").native()
    assert native.evaluate({}, {"x": b"a"}) is True
    assert native.evaluate({}, {"x": [1]}) is True
    assert Selector("x = 'a'").native().evaluate({}, {"x": b"a"}) is None
    with pytest.raises(InvalidArgumentError, match="long range"):
        Selector("x = 1").native().evaluate({}, {"x": 2**64})


def test_encoded_char_and_small_integer_properties() -> None:
    # Python's writer writes int as long and float as double; another producer
    # may write the other JMS types. Patch the tag and value of one property.
    message = TextMessage("x")
    message.set_property("p", 7)
    data = encode(message)
    at = data.index(b"\x01\x00\x00\x00p") + 5  # the value's tag after the name "p"
    assert data[at : at + 1] == b"l"
    for tag, packed, selector in [
        (b"b", struct.pack("<b", -3), "p = -3"),
        (b"s", struct.pack("<h", 300), "p = 300"),
        (b"i", struct.pack("<i", -70000), "p < 0"),
        (b"f", struct.pack("<f", 0.5), "p = 0.5"),
        (b"c", struct.pack("<H", ord("z")), "p = 'z' AND p LIKE '_'"),
        (b"Z", b"\x01", "p = TRUE"),
    ]:
        patched = data[:at] + tag + packed + data[at + 9 :]
        decoded = decode(patched)
        s = Selector(selector)
        assert s.matches(decoded.selector_headers(), decoded.properties), selector
        assert s.native().matches_message(patched, 0), selector


# ---------------------------------------------------------------- generated selectors

PROPERTIES = ["a", "b", "s", "t", "f"]
IDENTIFIERS = PROPERTIES + sorted(HEADER_IDENTIFIERS)
ALPHABET = "ab%_!é\n'"
EDGE_LONGS = [0, 1, -1, 2, 3, LONG_MAX, LONG_MIN, LONG_MAX - 1, LONG_MIN + 1, 2**53, 2**53 + 1, 2**32, -(2**31)]
EDGE_FLOATS = [0.0, -0.0, 0.5, -1.5, 2.0**53, 2.0**63, -(2.0**63), 1e308, 5e-324, 9.223372036854776e18]

longs = st.one_of(st.integers(LONG_MIN, LONG_MAX), st.sampled_from(EDGE_LONGS), st.integers(-5, 5))
finite_floats = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(EDGE_FLOATS))
floats = st.one_of(finite_floats, st.sampled_from([math.nan, math.inf, -math.inf]))
strings = st.text(alphabet=ALPHABET, max_size=4)
values = st.one_of(st.none(), st.booleans(), longs, floats, strings)


def quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


identifier = st.sampled_from(IDENTIFIERS)
number_literal = st.one_of(longs.map(str), finite_floats.map(repr))


@st.composite
def numeric(draw: st.DrawFn, depth: int = 2) -> str:
    """A numeric expression: literals, identifiers, chains of + - or * /, unary signs."""
    kind = draw(st.integers(0, 4 if depth > 0 else 1))
    if kind == 0:
        return draw(number_literal)
    if kind == 1:
        return draw(identifier)
    if kind == 2:
        ops = draw(st.lists(st.sampled_from(["+", "-"] if draw(st.booleans()) else ["*", "/"]), min_size=1, max_size=3))
        parts = [f"({draw(numeric(depth - 1))})"]
        for op in ops:
            parts += [op, f"({draw(numeric(depth - 1))})"]
        return " ".join(parts)
    return f"{draw(st.sampled_from(['-', '+']))}({draw(numeric(depth - 1))})"


@st.composite
def like_pattern(draw: st.DrawFn) -> str:
    escape = draw(st.booleans())
    pieces = ["a", "b", "é", "%", "_", "'"] + (["!%", "!_", "!!"] if escape else ["!"])
    pattern = "".join(draw(st.lists(st.sampled_from(pieces), max_size=5)))
    return quoted(pattern) + (" ESCAPE '!'" if escape else "")


@st.composite
def condition(draw: st.DrawFn, depth: int = 2) -> str:
    """A boolean expression the parser accepts."""
    kind = draw(st.integers(0, 10 if depth > 0 else 7))
    not_ = "NOT " if draw(st.booleans()) else ""
    if kind == 0:
        op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
        return f"{draw(numeric())} {op} {draw(numeric())}"
    if kind == 1:
        text = st.one_of(identifier, strings.map(quoted))
        return f"{draw(identifier)} {draw(st.sampled_from(['=', '<>']))} {draw(text)}"
    if kind == 2:
        return f"{draw(numeric())} {not_}BETWEEN {draw(numeric(1))} AND {draw(numeric(1))}"
    if kind == 3:
        items = ", ".join(quoted(s) for s in draw(st.lists(strings, min_size=1, max_size=3)))
        return f"{draw(identifier)} {not_}IN ({items})"
    if kind == 4:
        return f"{draw(identifier)} {not_}LIKE {draw(like_pattern())}"
    if kind == 5:
        return f"{draw(identifier)} IS {not_}NULL"
    if kind == 6:
        return draw(identifier)
    if kind == 7:
        return draw(st.sampled_from(["TRUE", "FALSE"]))
    if kind == 8:
        return f"NOT ({draw(condition(depth - 1))})"
    if kind == 9:
        # Booleans compared with booleans: conditions, flags, literals.
        side = st.one_of(condition(depth - 1).map(lambda c: f"({c})"), identifier, st.sampled_from(["TRUE", "FALSE"]))
        return f"{draw(side)} {draw(st.sampled_from(['=', '<>']))} {draw(side)}"
    op = draw(st.sampled_from([" AND ", " OR "]))
    return op.join(f"({c})" for c in draw(st.lists(condition(depth - 1), min_size=2, max_size=4)))


headers = st.fixed_dictionaries(
    {
        "JMSDeliveryMode": st.sampled_from(["PERSISTENT", "NON_PERSISTENT"]),
        "JMSPriority": st.integers(0, 9),
        "JMSMessageID": st.one_of(st.none(), strings),
        "JMSTimestamp": longs,
        "JMSCorrelationID": st.one_of(st.none(), strings),
        "JMSType": st.one_of(st.none(), strings),
        "JMSRedelivered": st.booleans(),
        "JMSDeliveryTime": longs,
        "JMSExpiration": longs,
    }
)
properties = st.fixed_dictionaries({name: values for name in PROPERTIES}).map(
    lambda d: {k: v for k, v in d.items() if v is not None}
)

SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(text=condition(), headers=headers, props=properties)
def test_native_evaluates_as_python(text: str, headers: dict[str, object], props: dict[str, object]) -> None:
    s = Selector(text)
    native = s.native()
    expected = s.evaluate(headers, props)
    event(f"evaluates to {expected}")  # --hypothesis-show-statistics: all three occur often
    assert native.evaluate(headers, props) is expected, text
    assert native.matches(headers, props) is (expected is True), text


@SETTINGS
@given(
    text=condition(),
    headers=headers,
    props=properties,
    ident=st.integers(0, 2**64 - 1),
    redelivery_count=st.integers(0, 3),
)
def test_native_on_encoded_messages_matches_python_on_decoded(
    text: str, headers: dict[str, object], props: dict[str, object], ident: int, redelivery_count: int
) -> None:
    message = TextMessage("body")
    persistent = headers["JMSDeliveryMode"] == "PERSISTENT"
    message.delivery_mode = DeliveryMode.PERSISTENT if persistent else DeliveryMode.NON_PERSISTENT
    message.priority = headers["JMSPriority"]  # type: ignore[assignment]
    message.message_id = headers["JMSMessageID"]  # type: ignore[assignment]
    message.timestamp = headers["JMSTimestamp"]  # type: ignore[assignment]
    message.correlation_id = headers["JMSCorrelationID"]  # type: ignore[assignment]
    message.type = headers["JMSType"]  # type: ignore[assignment]
    message.delivery_time = headers["JMSDeliveryTime"]  # type: ignore[assignment]
    message.expiration = headers["JMSExpiration"]  # type: ignore[assignment]
    message.id = ident
    for name, value in props.items():
        message.set_property(name, value)  # type: ignore[arg-type]
    data = encode(message)

    decoded = decode(data)
    decoded.redelivered = redelivery_count > 0  # as the broker sets it from the pager's count
    s = Selector(text)
    expected = s.matches(decoded.selector_headers(), decoded.properties)
    event(f"matches: {expected}")
    assert s.native().matches_message(data, redelivery_count) is expected, text
