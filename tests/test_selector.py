"""JMS message selectors: JMS 2.0 specification, section 3.8.1.

Each test cites the rule it checks. ``sel(text, **props)`` evaluates a selector
against properties only; header tests pass headers explicitly.
"""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jmsstore.errors import JmsStoreError
from jmsstore.selector import MAX_NESTING, InvalidSelectorError, Selector


def sel(text: str, **props: object) -> bool:
    return Selector(text).matches({}, props)


def ev(text: str, **props: object) -> bool | None:
    return Selector(text).evaluate({}, props)


# ---------------------------------------------------------------- the API


def test_error_class_hierarchy() -> None:
    # The brief: InvalidSelectorError is a JmsStoreError and a ValueError.
    assert issubclass(InvalidSelectorError, JmsStoreError)
    assert issubclass(InvalidSelectorError, ValueError)


@pytest.mark.parametrize("text", ["", None, "   ", "\n\t"])
def test_empty_selector_selects_everything(text: str | None) -> None:
    # §3.8.1: "If the value of a message selector is an empty string, the value is treated as a null
    # and indicates that there is no message selector for the message consumer."
    s = Selector(text)
    assert s.matches({}, {})
    assert s.matches({"JMSPriority": 4}, {"x": None})
    assert s.identifiers == frozenset()
    assert s.text == (text or "")


def test_text_and_identifiers() -> None:
    s = Selector("color = 'red' AND JMSPriority > 3 OR w IS NULL OR name LIKE 'a%' OR k IN ('x')")
    assert s.text.startswith("color")
    assert s.identifiers == frozenset({"color", "JMSPriority", "w", "name", "k"})


# ---------------------------------------------------------------- literals


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # string literals in single quotes; '' is a quote (§3.8.1.1 "literal")
        ("s = 'literal'", "literal"),
        ("s = 'literal''s'", "literal's"),
        ("s = ''''", "'"),
        ("s = ''", ""),
        ("s = 'two\nlines'", "two\nlines"),
        ("s = 'naïve ü'", "naïve ü"),
    ],
)
def test_string_literals(text: str, expected: str) -> None:
    assert sel(text, s=expected)
    assert not sel(text, s=expected + "x")


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        # exact numeric literals: integers without a decimal point, in the range of a Java long
        ("57", 57),
        ("-957", -957),
        ("+62", 62),
        ("0", 0),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        # approximate numeric literals: exponent and/or decimal point
        ("7E3", 7000.0),
        ("-57.9E2", -5790.0),
        ("7.", 7.0),
        ("-95.7", -95.7),
        ("+6.2", 6.2),
        (".5", 0.5),
        ("1e-2", 0.01),
        ("2E+2", 200.0),
    ],
)
def test_numeric_literals(literal: str, value: float) -> None:
    assert sel(f"n = {literal}", n=value)
    assert not sel(f"n <> {literal}", n=value)


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        # §3.8.1.1: "Exact numeric literals use the Java integer literal syntax" (a long: with L or without)
        ("57L", 57),
        ("57l", 57),
        ("-957L", -957),
        ("0x1D", 29),
        ("0X1d", 29),
        ("0x1dL", 29),
        ("-0x10", -16),
        ("0x7FFFFFFFFFFFFFFF", 2**63 - 1),
        ("0xFFFFFFFFFFFFFFFFL", -1),  # a 64-bit pattern, as a Java long literal
        ("0x8000000000000000", -(2**63)),
        ("035", 29),  # octal, as in Java: not 35
        ("0777L", 511),
        ("00", 0),
        ("01777777777777777777777", -1),
        ("-9223372036854775808L", -(2**63)),
        # "approximate literals use the Java floating-point literal syntax"
        ("1.5f", 1.5),
        ("1.5F", 1.5),
        ("1.5D", 1.5),
        ("1.5d", 1.5),
        ("2f", 2.0),
        ("2d", 2.0),
        ("1e3f", 1000.0),
        (".25D", 0.25),
        ("0.1d", 0.1),
        ("0.1f", 0.10000000149011612),  # rounded to a Java float, then widened: not 0.1
        ("08.5", 8.5),  # a leading zero makes no octal floating-point literal
    ],
)
def test_numeric_literals_in_java_syntax(literal: str, value: float) -> None:
    assert sel(f"n = {literal}", n=value)
    assert not sel(f"n <> {literal}", n=value)
    assert Selector(f"n = {literal}").native() is not None  # the broker core evaluates the same literal


def test_a_float_literal_is_not_the_double_of_the_same_digits() -> None:
    # Java: 0.1f == 0.1 is false; 0.5f == 0.5 is true (exact in both).
    assert not sel("n = 0.1f", n=0.1)
    assert sel("n = 0.5f", n=0.5)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("n = 08", "malformed octal literal '08'"),
        ("n = 0779", "malformed octal literal '0779'"),
        ("n = 1.5L", "L marks an exact"),
        ("n = 1e3L", "L marks an exact"),
        ("n = 0x", "malformed numeric literal"),
        ("n = 0x1G", "malformed numeric literal"),
        ("n = 12LL", "malformed numeric literal"),
        ("n = 1.5fd", "malformed numeric literal"),
        ("n = 0x10000000000000000", "wider than a Java long"),
        ("n = 02000000000000000000000", "wider than a Java long"),
        ("n = 9223372036854775808L", "outside the range of a Java long"),
        ("n = 1e39f", "out of range"),
    ],
)
def test_malformed_java_literals_are_invalid_selectors(text: str, message: str) -> None:
    with pytest.raises(InvalidSelectorError, match=re.escape(message)):
        Selector(text)


@pytest.mark.parametrize("text", ["TRUE", "true", "True", "tRuE"])
def test_boolean_literal_keywords_case_insensitive(text: str) -> None:
    # TRUE / FALSE are case-insensitive keywords
    assert sel(text)
    assert not sel("NOT " + text)
    assert sel(f"f = {text}", f=True)
    assert sel(f"f <> {text}", f=False)
    assert not sel("FALSE") and not sel("false")


def test_identifiers_are_case_sensitive_and_java_like() -> None:
    # identifiers: Java identifier rules, case-sensitive
    assert sel("Color = 'red'", Color="red")
    assert not sel("color = 'red'", Color="red")
    assert sel("_x$1 = 1", **{"_x$1": 1})
    assert sel("$a = 1", **{"$a": 1})
    assert sel("größe = 2", **{"größe": 2})
    assert sel("JMSXGroupID = 'g'", JMSXGroupID="g")  # JMSX properties are properties


@pytest.mark.parametrize("word", ["NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"])
@pytest.mark.parametrize("case", [str.upper, str.lower])
def test_reserved_words_are_not_identifiers(word: str, case: object) -> None:
    # identifiers cannot be NULL, TRUE, FALSE, NOT, AND, OR, BETWEEN, LIKE, IN, IS or ESCAPE
    assert callable(case)
    with pytest.raises(InvalidSelectorError, match="position"):
        Selector(f"{case(word)} = 1")


def test_missing_identifier_is_null() -> None:
    # "If a property that does not exist in a message is referenced, its value is NULL."
    assert ev("missing = 1") is None
    assert sel("missing IS NULL")
    assert not sel("missing = 1") and not sel("NOT (missing = 1)")


# ---------------------------------------------------------------- headers vs properties


def test_header_identifiers_come_from_headers() -> None:
    # JMSDeliveryMode, JMSPriority, JMSMessageID, JMSTimestamp, JMSCorrelationID and JMSType
    # reference header fields; everything else is a property.
    headers = {
        "JMSDeliveryMode": "PERSISTENT",
        "JMSPriority": 7,
        "JMSMessageID": "ID:1",
        "JMSTimestamp": 1000,
        "JMSCorrelationID": "c-1",
        "JMSType": "order",
        "JMSRedelivered": False,
        "JMSExpiration": 0,
        "JMSDeliveryTime": 999,
    }
    props = {"JMSPriority": 1, "JMSType": "wrong"}
    for text in [
        "JMSDeliveryMode = 'PERSISTENT'",
        "JMSPriority > 5",
        "JMSMessageID = 'ID:1'",
        "JMSTimestamp BETWEEN 999 AND 1001",
        "JMSCorrelationID = 'c-1'",
        "JMSType = 'order'",
        "JMSRedelivered = FALSE",
        "JMSExpiration = 0",
        "JMSDeliveryTime < JMSTimestamp",
    ]:
        assert Selector(text).matches(headers, props), text
    # a property of a header's name is not seen; a header is not seen as a property
    assert not Selector("JMSPriority = 1").matches(headers, props)
    assert not Selector("color = 'red'").matches({"color": "red"}, {})
    # NON_PERSISTENT compares as a string
    assert Selector("JMSDeliveryMode = 'NON_PERSISTENT'").matches({"JMSDeliveryMode": "NON_PERSISTENT"}, {})
    # a null header (e.g. no JMSCorrelationID) is NULL
    assert Selector("JMSCorrelationID IS NULL").matches({"JMSCorrelationID": None}, {})
    assert Selector("JMSType IS NULL").matches({}, {})


# ---------------------------------------------------------------- comparison operators


@pytest.mark.parametrize(
    ("op", "results"),  # results for 1 op 2, 2 op 2, 3 op 2
    [
        ("=", (False, True, False)),
        ("<>", (True, False, True)),
        ("<", (True, False, False)),
        ("<=", (True, True, False)),
        (">", (False, False, True)),
        (">=", (False, True, True)),
    ],
)
def test_numeric_comparisons(op: str, results: tuple[bool, bool, bool]) -> None:
    # comparison operators: =, >, >=, <, <=, <> (not equal)
    assert tuple(sel(f"x {op} 2", x=v) for v in (1, 2, 3)) == results
    assert tuple(sel(f"x {op} 2.0", x=float(v)) for v in (1, 2, 3)) == results


def test_strings_and_booleans_compare_by_equality_only() -> None:
    # "String and Boolean comparison is restricted to = and <>"
    assert sel("s = 'a'", s="a") and sel("s <> 'a'", s="b")
    assert sel("s = t", s="a", t="a") and not sel("s <> t", s="a", t="a")
    assert sel("b = TRUE", b=True) and sel("b <> TRUE", b=False)
    for op in ("<", "<=", ">", ">="):
        with pytest.raises(InvalidSelectorError, match="position"):
            Selector(f"s {op} 'a'")
        with pytest.raises(InvalidSelectorError, match="position"):
            Selector(f"b {op} TRUE")
        # two properties that turn out to be strings/booleans: UNKNOWN at run time
        assert ev(f"s {op} t", s="a", t="b") is None
        assert ev(f"s {op} t", s=True, t=False) is None


@pytest.mark.parametrize(
    ("text", "props"),
    [
        # "Two values of different types ... comparison ... is UNKNOWN" (not an error at run time)
        ("x = 1", {"x": "1"}),
        ("x = 'a'", {"x": 1}),
        ("x = TRUE", {"x": 1}),
        ("x = 1", {"x": True}),
        ("x = 0", {"x": False}),
        ("x = 'a'", {"x": b"a"}),
        ("x = y", {"x": b"a", "y": b"a"}),
        ("x < 1", {"x": "0"}),
        ("x = y", {"x": "1", "y": 1}),
    ],
)
def test_mismatched_types_are_unknown(text: str, props: dict[str, object]) -> None:
    assert ev(text, **props) is None
    assert not sel(text, **props) and not sel(f"NOT ({text})", **props)


@pytest.mark.parametrize("text", ["'a' > 1", "'a' = 1", "TRUE = 1", "TRUE + 1", "'a' + 1", "-'a' = 1", "1 = 'a' AND x"])
def test_ill_typed_literals_rejected_at_parse_time(text: str) -> None:
    with pytest.raises(InvalidSelectorError, match="position"):
        Selector(text)


# ---------------------------------------------------------------- arithmetic


@pytest.mark.parametrize(
    ("text", "props"),
    [
        # arithmetic operators: +, -, *, / and unary + -
        ("x + 2 = 5", {"x": 3}),
        ("x - 2 = 1", {"x": 3}),
        ("x * 2 = 6", {"x": 3}),
        ("x / 2 = 1.5", {"x": 3.0}),
        ("-x = -3", {"x": 3}),
        ("+x = 3", {"x": 3}),
        ("- -x = 3", {"x": 3}),
        ("-(x - 5) = 2", {"x": 3}),
        ("x + y = 3.5", {"x": 3, "y": 0.5}),  # ints and floats mix
        ("x * y = 1.5", {"x": 3, "y": 0.5}),
        ("x = 3.0", {"x": 3}),
        ("x = 3", {"x": 3.0}),
        ("x + 1 > 9223372036854775807", {"x": 2**63 - 1}),  # no wrap-around: Python ints
    ],
)
def test_arithmetic(text: str, props: dict[str, object]) -> None:
    assert sel(text, **props)


@pytest.mark.parametrize(
    ("a", "b", "q"),
    # integer division truncates toward zero (Java long division)
    [(7, 2, 3), (-7, 2, -3), (7, -2, -3), (-7, -2, 3), (6, 3, 2), (0, 5, 0), (1, 2, 0), (-1, 2, 0)],
)
def test_integer_division_truncates_toward_zero(a: int, b: int, q: int) -> None:
    s = Selector("a / b = q")
    assert s.matches({}, {"a": a, "b": b, "q": q})
    assert not s.matches({}, {"a": a, "b": b, "q": q + 1})


def test_float_division_is_float() -> None:
    assert sel("a / b = 3.5", a=7.0, b=2)
    assert sel("a / b = 3.5", a=7, b=2.0)
    assert sel("7 / 2.0 = 3.5")


@pytest.mark.parametrize("text", ["x / 0 = 1", "x / 0 <> 1", "x / 0.0 = 1", "x / y = 1", "1 / x = 1"])
def test_division_by_zero_is_null(text: str) -> None:
    # division by zero never raises; the result is NULL and comparisons with it are UNKNOWN
    assert ev(text, x=0, y=0.0) is None


@pytest.mark.parametrize("text", ["x + 1 = 2", "x * 1 = 1", "-x = 1", "+x = 1", "x / 1 = 1"])
@pytest.mark.parametrize("value", [None, "1", True, b"1"])
def test_arithmetic_on_null_or_non_numbers_is_null(text: str, value: object) -> None:
    assert ev(text, x=value) is None


# ---------------------------------------------------------------- precedence


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 + 2 * 3 = 7", True),  # * binds tighter than +
        ("(1 + 2) * 3 = 9", True),
        ("10 - 4 - 3 = 3", True),  # left associative
        ("16 / 4 / 2 = 2", True),
        ("2 * 3 / 4 = 1", True),
        ("-2 * -3 = 6", True),
        ("TRUE OR TRUE AND FALSE", True),  # AND before OR
        ("(TRUE OR TRUE) AND FALSE", False),
        ("NOT FALSE AND FALSE", False),  # NOT before AND
        ("NOT (FALSE AND FALSE)", True),
        ("NOT 1 = 2", True),  # comparison before NOT
        ("FALSE OR NOT FALSE", True),
        ("NOT NOT TRUE", True),
        ("1 < 2 AND 2 < 3 OR 1 = 0", True),
        ("1 + 1 BETWEEN 2 AND 1 + 1", True),  # arithmetic before BETWEEN
    ],
)
def test_precedence(text: str, expected: bool) -> None:
    assert sel(text) is expected


# ---------------------------------------------------------------- BETWEEN


@pytest.mark.parametrize(
    ("value", "inside"),
    [(14, False), (15, True), (17, True), (19, True), (20, False), (15.0, True), (19.5, False), (14.99, False)],
)
def test_between_is_inclusive(value: float, inside: bool) -> None:
    # "age BETWEEN 15 AND 19 is equivalent to age >= 15 AND age <= 19"
    assert sel("age BETWEEN 15 AND 19", age=value) is inside
    # "age NOT BETWEEN 15 AND 19 is equivalent to age < 15 OR age > 19"
    assert sel("age NOT BETWEEN 15 AND 19", age=value) is not inside


def test_between_with_expressions_null_and_types() -> None:
    assert sel("x BETWEEN lo AND hi - 1", x=3, lo=1, hi=4)
    assert ev("x BETWEEN 1 AND 2") is None and ev("x NOT BETWEEN 1 AND 2") is None
    assert ev("x BETWEEN 1 AND 2", x="1") is None
    assert ev("x BETWEEN lo AND 5", x=3) is None  # NULL bound: UNKNOWN
    assert ev("x BETWEEN lo AND 2", x=3) is False  # ... but FALSE AND UNKNOWN is FALSE
    with pytest.raises(InvalidSelectorError, match="position"):
        Selector("x BETWEEN 'a' AND 'b'")
    with pytest.raises(InvalidSelectorError, match="position"):
        Selector("x BETWEEN 1 OR 2")


# ---------------------------------------------------------------- IN


def test_in() -> None:
    # "Country IN (' UK', 'US', 'France') is true for 'UK' and false for 'Peru'"
    text = "Country IN ('UK', 'US', 'France')"
    assert sel(text, Country="UK") and sel(text, Country="France")
    assert not sel(text, Country="Peru") and not sel(text, Country="uk")
    assert sel("Country NOT IN ('UK', 'US', 'France')", Country="Peru")
    assert not sel("Country NOT IN ('UK', 'US', 'France')", Country="US")
    assert sel("x IN ('it''s')", x="it's")
    assert sel("x IN ('only')", x="only")
    # "If identifier of an IN or NOT IN operation is NULL, the value of the operation is unknown."
    assert ev(text) is None and ev("Country NOT IN ('UK')") is None
    assert ev("x IN ('1')", x=1) is None


@pytest.mark.parametrize(
    "text", ["x IN (1, 2)", "x IN ('a', 1)", "x IN ()", "x IN 'a'", "x IN ('a'", "x IN ('a',)", "1 IN ('a')"]
)
def test_in_syntax_errors(text: str) -> None:
    # the IN list holds string literals only; the left side is an identifier
    with pytest.raises(InvalidSelectorError, match="position"):
        Selector(text)


# ---------------------------------------------------------------- LIKE


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        # "phone LIKE '12%3' is true for '123' '12993' and false for '1234'"
        ("12%3", "123", True),
        ("12%3", "12993", True),
        ("12%3", "1234", False),
        # "word LIKE 'l_se' is true for 'lose' and false for 'loose'"
        ("l_se", "lose", True),
        ("l_se", "loose", False),
        ("%", "", True),
        ("%", "anything", True),
        ("_", "", False),
        ("_", "x", True),
        ("a%", "abc", True),
        ("a%", "bac", False),
        ("%c", "abc", True),
        ("%c", "abd", False),
        ("%b%", "abc", True),
        ("_b_", "abc", True),
        ("_b_", "abcd", False),
        ("__", "ab", True),
        ("abc", "abc", True),
        ("abc", "abcd", False),  # the whole value must match
        ("abc", "xabc", False),
        ("ABC", "abc", False),  # case-sensitive
        # regex special characters are literal
        ("a.c", "abc", False),
        ("a.c", "a.c", True),
        ("a*", "aaa", False),
        ("a*", "a*", True),
        ("[ab]", "a", False),
        ("[ab]", "[ab]", True),
        ("(x)+?", "(x)+?", True),
        ("^$\\|{1}", "^$\\|{1}", True),
        # multi-line values: % and _ match newlines too
        ("a%z", "a\n\nz", True),
        ("a_z", "a\nz", True),
        ("line1\nline2", "line1\nline2", True),
        ("it''s%", "it's fine", True),
    ],
)
def test_like(pattern: str, value: str, expected: bool) -> None:
    assert sel(f"s LIKE '{pattern}'", s=value) is expected
    assert sel(f"s NOT LIKE '{pattern}'", s=value) is not expected


@pytest.mark.parametrize(
    ("text", "value", "expected"),
    [
        # "underscore LIKE '\_%' ESCAPE '\' is true for '_foo' and false for 'bar'"
        ("s LIKE '\\_%' ESCAPE '\\'", "_foo", True),
        ("s LIKE '\\_%' ESCAPE '\\'", "bar", False),
        ("s LIKE '\\_%' ESCAPE '\\'", "xfoo", False),
        ("s LIKE '100!%' ESCAPE '!'", "100%", True),
        ("s LIKE '100!%' ESCAPE '!'", "1000", False),
        ("s LIKE '%!%%' ESCAPE '!'", "a%b", True),
        ("s LIKE '%!%%' ESCAPE '!'", "ab", False),
        ("s LIKE 'a!!b' ESCAPE '!'", "a!b", True),  # the escape character escapes itself
        ("s LIKE '#_#%' ESCAPE '#'", "_%", True),
        ("s LIKE '#_#%' ESCAPE '#'", "ab", False),
        ("s LIKE 'a.%' ESCAPE '.'", "a%", True),  # a regex metacharacter as the escape
        ("s LIKE 'a.%' ESCAPE '.'", "ab", False),
        ("s LIKE 'x''_' ESCAPE ''''", "x_", True),  # the quote itself as escape character
        ("s NOT LIKE '!_' ESCAPE '!'", "_", False),
    ],
)
def test_like_escape(text: str, value: str, expected: bool) -> None:
    assert sel(text, s=value) is expected


def test_like_null_and_non_strings_are_unknown() -> None:
    # "If identifier of a LIKE or NOT LIKE operation is NULL, the value of the operation is unknown."
    assert ev("s LIKE 'a%'") is None and ev("s NOT LIKE 'a%'") is None
    assert ev("s LIKE '1'", s=1) is None and ev("s LIKE 'a'", s=b"a") is None


@pytest.mark.parametrize(
    "text",
    [
        "s LIKE 'a' ESCAPE 'ab'",  # more than one character
        "s LIKE 'a' ESCAPE ''",
        "s LIKE 'a' ESCAPE 1",
        "s LIKE 'a' ESCAPE",
        "s LIKE 1",
        "s LIKE t",
        "s LIKE 'a!' ESCAPE '!'",  # dangling escape
        "s LIKE 'a!b' ESCAPE '!'",  # escape before an ordinary character
        "1 LIKE 'a'",
    ],
)
def test_like_syntax_errors(text: str) -> None:
    with pytest.raises(InvalidSelectorError, match="position"):
        Selector(text)


# ---------------------------------------------------------------- IS NULL


@pytest.mark.parametrize("value", [None, 0, "", False, 1.5, b""])
def test_is_null(value: object) -> None:
    # "identifier IS NULL" tests for a null header field value or a missing property value
    assert sel("x IS NULL", x=value) is (value is None)
    assert sel("x IS NOT NULL", x=value) is (value is not None)
    assert sel("x is not null", x=value) is (value is not None)


def test_is_null_absent_and_errors() -> None:
    assert sel("x IS NULL") and not sel("x IS NOT NULL")
    for text in ["x IS 1", "x IS", "x IS NOT", "1 IS NULL", "x = NULL", "NULL IS NULL"]:
        with pytest.raises(InvalidSelectorError, match="position"):
            Selector(text)


# ---------------------------------------------------------------- three-valued logic

T, F, U = True, False, None
# SQL truth tables (JMS 2.0 §3.8.1.2, tables 3-4 to 3-6)
AND_TABLE = {(T, T): T, (T, F): F, (T, U): U, (F, T): F, (F, F): F, (F, U): F, (U, T): U, (U, F): F, (U, U): U}
OR_TABLE = {(T, T): T, (T, F): T, (T, U): T, (F, T): T, (F, F): F, (F, U): U, (U, T): T, (U, F): U, (U, U): U}
NOT_TABLE = {T: F, F: T, U: U}


def lit(v: bool | None) -> str:
    """A condition that evaluates to v with no properties: UNKNOWN is a comparison with a missing one."""
    return "(missing = 1)" if v is None else ("TRUE" if v else "FALSE")


@pytest.mark.parametrize(("a", "b"), list(AND_TABLE))
def test_and_truth_table(a: bool | None, b: bool | None) -> None:
    assert ev("a AND b", a=a, b=b) is AND_TABLE[a, b]
    # UNKNOWN from a comparison with NULL behaves the same as a NULL boolean property
    assert ev(f"{lit(a)} AND {lit(b)}") is AND_TABLE[a, b]


@pytest.mark.parametrize(("a", "b"), list(OR_TABLE))
def test_or_truth_table(a: bool | None, b: bool | None) -> None:
    assert ev("a OR b", a=a, b=b) is OR_TABLE[a, b]
    assert ev(f"{lit(a)} OR {lit(b)}") is OR_TABLE[a, b]


@pytest.mark.parametrize("a", list(NOT_TABLE))
def test_not_truth_table(a: bool | None) -> None:
    assert ev("NOT a", a=a) is NOT_TABLE[a]
    assert ev(f"NOT {lit(a)}") is NOT_TABLE[a]
    # only TRUE selects; NOT UNKNOWN is UNKNOWN, so neither "a" nor "NOT a" selects when a is NULL
    assert sel("a", a=a) is (a is True)
    assert sel("NOT a", a=a) is (a is False)


def test_non_boolean_property_as_condition_is_unknown() -> None:
    assert ev("x", x=1) is None and ev("x", x="TRUE") is None and ev("NOT x", x=0) is None
    assert ev("x AND TRUE", x=1) is None and ev("x OR FALSE", x="a") is None


@pytest.mark.parametrize("op", ["=", "<>", "<", "<=", ">", ">="])
def test_comparison_with_null_is_unknown(op: str) -> None:
    assert ev(f"x {op} 1") is None
    assert ev(f"1 {op} x") is None
    assert ev(f"x {op} y", x=1) is None


# ---------------------------------------------------------------- invalid selectors


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("(a = 1", 6),  # unbalanced parentheses
        ("a = 1)", 5),
        ("((a = 1)", 8),
        ("a = 'abc", 4),  # unterminated string
        ("a = 'it''s", 4),
        ("a =", 3),  # missing operand
        ("= 1", 0),
        ("a = 1 AND", 9),
        ("a + = 1", 4),
        ("NOT", 3),
        ("a = 1 OR OR b = 2", 9),
        ("AND = 1", 0),  # reserved word as identifier
        ("a = 1 AND in = 2", 10),
        ("x IN (1)", 6),  # IN with a non-string
        ("s LIKE 'a' ESCAPE 'ab'", 18),  # ESCAPE of more than one character
        ("a = 1 b", 6),  # trailing garbage
        ("a = 1 2", 6),
        ("a = 1 'x'", 6),
        ("a = 1;", 5),  # unexpected character
        ("a == 1", 3),
        ("a != 1", 2),
        ("a = 1 = 1", 6),  # comparisons do not chain
        ("a = 12abc", 4),  # malformed number
        ("a = 1.2.3", 4),
        ("9223372036854775808 = a", 0),  # out of the Java long range
        ("a = -9223372036854775809", 4),
        ("a NOT = 1", 2),
        ("1", 0),  # not a boolean expression
        ("a + 1", 2),
        ("'red'", 0),
    ],
)
def test_invalid_selectors_name_the_position(text: str, position: int) -> None:
    with pytest.raises(InvalidSelectorError) as info:
        Selector(text)
    assert info.value.position == position
    assert f"position {position}" in str(info.value)


# ---------------------------------------------------------------- limits: nesting, literal size, argument type


@pytest.mark.parametrize(
    "text",
    [
        "(" * 400 + "a = 1" + ")" * 400,
        "NOT " * 2000 + "TRUE",
        "- " * 2000 + "a = 1",
        "(" * 100_000,
        "(" * (MAX_NESTING - 1) + "a = 1" + ")" * (MAX_NESTING - 1),  # one level too many, inside
        "NOT " * MAX_NESTING + "TRUE",
        "(" * MAX_NESTING + "TRUE" + ")" * MAX_NESTING,
    ],
)
def test_nesting_deeper_than_the_limit_is_an_invalid_selector(text: str) -> None:
    # Deep nesting once raised RecursionError (issue 23).
    with pytest.raises(InvalidSelectorError, match=f"nests more than {MAX_NESTING} levels deep"):
        Selector(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NOT " * (MAX_NESTING - 1) + "TRUE", (MAX_NESTING - 1) % 2 == 0),
        ("(" * (MAX_NESTING - 1) + "TRUE" + ")" * (MAX_NESTING - 1), True),
        ("(" * (MAX_NESTING - 2) + "a = 1" + ")" * (MAX_NESTING - 2), True),
        ("- " * (MAX_NESTING - 2) + "a = 1", MAX_NESTING % 2 == 0),
        ("+ " * (MAX_NESTING - 2) + "a = 1", True),  # each + evaluates its operand once, not twice
    ],
)
def test_deepest_allowed_selectors_parse_and_evaluate(text: str, expected: bool) -> None:
    assert sel(text, a=1) is expected


def test_long_chains_are_not_deep() -> None:
    # A chain of one operator is one level: long generated selectors parse and evaluate.
    ors = " OR ".join(f"a = {i}" for i in range(5000))
    assert sel(ors, a=4999) and not sel(ors, a=5000)
    assert sel(" AND ".join(["a = 1"] * 5000), a=1)
    assert sel(" + ".join(["a"] * 5000) + " = 5000", a=1)
    assert sel(" - ".join(["a"] * 3) + " = -1", a=1)  # still left to right
    assert sel(" / ".join(["a"] * 3) + " = 0", a=4)  # (4 / 4) / 4, not 4 / (4 / 4)


def test_nesting_limit_holds_whatever_the_recursion_limit() -> None:
    # The parser runs on a list, not on Python's stack: the limit, not the
    # recursion limit, decides what parses.
    depth = 0
    frame = sys._getframe()
    while frame.f_back is not None:
        frame, depth = frame.f_back, depth + 1
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 60)
    try:
        with pytest.raises(InvalidSelectorError, match="levels deep"):
            Selector("(" * 400 + "a = 1" + ")" * 400)
        with pytest.raises(InvalidSelectorError, match="levels deep"):
            Selector("NOT " * 2000 + "TRUE")
        deepest = Selector("(" * (MAX_NESTING - 2) + "a = 1" + ")" * (MAX_NESTING - 2))
    finally:
        sys.setrecursionlimit(previous)
    assert deepest.matches({}, {"a": 1})


@pytest.mark.parametrize("digits", [20, 5000, 100_000])
def test_huge_integer_literals_are_invalid_selectors(digits: int) -> None:
    # A 5,000-digit literal once raised ValueError (Python's int-to-str digit limit).
    text = "a = " + "9" * digits
    with pytest.raises(InvalidSelectorError, match=f"{digits} digits is outside the range of a Java long") as info:
        Selector(text)
    assert info.value.position == 4
    # Leading zeros are no digits of the value; approximate literals may be long.
    assert sel("a = " + "0" * 5000 + "7", a=7)
    assert sel("a < 0." + "9" * 5000, a=0)


@pytest.mark.parametrize("text", [1, 1.5, b"a = 1", ["a = 1"], object(), True])
def test_a_selector_that_is_not_a_string_is_an_invalid_selector(text: object) -> None:
    # A non-string selector once raised AttributeError.
    with pytest.raises(InvalidSelectorError, match=f"a selector is a str or None, not {type(text).__name__}"):
        Selector(text)  # type: ignore[arg-type]


def test_long_overflow_becomes_the_nearest_float() -> None:
    # Java longs wrap around; Python ints grow. Selectors do neither: an integer
    # result outside the long range is the nearest double (as the Rust core has it).
    big = 2**63 - 1
    assert ev("a + 1 = 9223372036854775808.0", a=big)
    assert ev("a + 1 > a", a=big)
    assert ev("a * 2 - a = a", a=big) is False  # 2a is rounded, so the difference is too
    assert ev("-a = 9223372036854775808.0", a=-(2**63))
    assert ev("a / b = 9223372036854775808.0", a=-(2**63), b=-1)
    assert ev("a * a * a > 0", a=big)
    assert ev("a + 1 - 1 = a", a=big - 1)  # in range, nothing is rounded


# ---------------------------------------------------------------- property test against a reference

PROPS = ("a", "b", "s", "f")
num_value = st.one_of(st.none(), st.integers(-5, 5), st.sampled_from([0.5, -1.5, 2.0]))
str_value = st.one_of(st.none(), st.sampled_from(["", "x", "ab", "a.b", "a%", "xyz", "a\nb"]))
bool_value = st.one_of(st.none(), st.booleans())
WORDS = ["", "x", "ab", "a.b", "xyz"]
PATTERNS = ["%", "_", "a%", "%b", "a_b", "x%z", "a.b", "%.%", "__", "a!%"]

num_expr = st.recursive(
    st.one_of(st.sampled_from([("var", "a"), ("var", "b")]), st.integers(-3, 3).map(lambda n: ("lit", n))),
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["+", "-", "*", "/"]), inner, inner),
        st.tuples(st.just("neg"), inner),
    ),
    max_leaves=4,
)
atom = st.one_of(
    st.tuples(st.just("cmp"), st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), num_expr, num_expr),
    st.tuples(st.just("streq"), st.sampled_from(["=", "<>"]), st.sampled_from(WORDS)),
    st.tuples(st.just("in"), st.booleans(), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)),
    st.tuples(st.just("like"), st.booleans(), st.sampled_from(PATTERNS)),
    st.tuples(st.just("between"), st.booleans(), num_expr, num_expr, num_expr),
    st.tuples(st.just("isnull"), st.booleans(), st.sampled_from(PROPS)),
    st.just(("flag",)),
    st.sampled_from([("const", True), ("const", False)]),
)
bool_expr = st.recursive(
    atom,
    lambda inner: st.one_of(
        st.tuples(st.just("and"), inner, inner),
        st.tuples(st.just("or"), inner, inner),
        st.tuples(st.just("not"), inner),
    ),
    max_leaves=6,
)


def render(e: tuple[object, ...]) -> str:
    """The selector text for a generated tree (fully parenthesized)."""
    tag = e[0]
    if tag == "var":
        return str(e[1])
    if tag == "lit":
        return str(e[1])
    if tag == "neg":
        return f"(-{render(e[1])})"  # type: ignore[arg-type]
    if tag in ("+", "-", "*", "/"):
        return f"({render(e[1])} {tag} {render(e[2])})"  # type: ignore[arg-type]
    if tag == "cmp":
        return f"({render(e[2])} {e[1]} {render(e[3])})"  # type: ignore[arg-type]
    if tag == "streq":
        return f"(s {e[1]} '{e[2]}')"
    if tag == "in":
        items = ", ".join(f"'{w}'" for w in e[2])  # type: ignore[attr-defined]
        return f"(s {'NOT ' if e[1] else ''}IN ({items}))"
    if tag == "like":
        return f"(s {'NOT ' if e[1] else ''}LIKE '{e[2]}' ESCAPE '!')"
    if tag == "between":
        not_ = "NOT " if e[1] else ""
        return f"({render(e[2])} {not_}BETWEEN {render(e[3])} AND {render(e[4])})"  # type: ignore[arg-type]
    if tag == "isnull":
        return f"({e[2]} IS {'NOT ' if e[1] else ''}NULL)"
    if tag == "flag":
        return "f"
    if tag == "const":
        return "TRUE" if e[1] else "FALSE"
    if tag in ("and", "or"):
        return f"({render(e[1])} {tag.upper()} {render(e[2])})"  # type: ignore[arg-type,attr-defined]
    assert tag == "not"
    return f"(NOT {render(e[1])})"  # type: ignore[arg-type]


def ref_num(e: tuple[object, ...], env: dict[str, object]) -> float | None:
    """Reference arithmetic: None is NULL; int division truncates toward zero; x/0 is NULL."""
    tag = e[0]
    if tag == "var":
        return env[str(e[1])]  # type: ignore[return-value]
    if tag == "lit":
        return e[1]  # type: ignore[return-value]
    if tag == "neg":
        v = ref_num(e[1], env)  # type: ignore[arg-type]
        return None if v is None else -v
    x, y = ref_num(e[1], env), ref_num(e[2], env)  # type: ignore[arg-type]
    if x is None or y is None:
        return None
    if tag == "+":
        return x + y
    if tag == "-":
        return x - y
    if tag == "*":
        return x * y
    if y == 0:
        return None
    if isinstance(x, int) and isinstance(y, int):
        return int(x / y)  # small operands: float division then truncation is exact
    return x / y


def ref_like(pattern: str, value: str) -> bool:
    """Reference LIKE with escape '!': straightforward recursive matching."""
    if not pattern:
        return value == ""
    if pattern[0] == "!":
        return bool(value) and value[0] == pattern[1] and ref_like(pattern[2:], value[1:])
    if pattern[0] == "%":
        return any(ref_like(pattern[1:], value[i:]) for i in range(len(value) + 1))
    if pattern[0] == "_":
        return bool(value) and ref_like(pattern[1:], value[1:])
    return bool(value) and value[0] == pattern[0] and ref_like(pattern[1:], value[1:])


def ref_cmp(op: str, x: object, y: object) -> bool | None:
    if x is None or y is None:
        return None
    return {
        "=": x == y,
        "<>": x != y,
        "<": x < y,  # type: ignore[operator]
        "<=": x <= y,  # type: ignore[operator]
        ">": x > y,  # type: ignore[operator]
        ">=": x >= y,  # type: ignore[operator]
    }[op]


def ref_not(v: bool | None) -> bool | None:
    return NOT_TABLE[v]


def ref_bool(e: tuple[object, ...], env: dict[str, object]) -> bool | None:
    tag = e[0]
    s = env["s"]
    if tag == "cmp":
        return ref_cmp(str(e[1]), ref_num(e[2], env), ref_num(e[3], env))  # type: ignore[arg-type]
    if tag == "streq":
        return ref_cmp(str(e[1]), s, e[2])
    if tag == "in":
        r = None if s is None else s in e[2]  # type: ignore[operator]
        return ref_not(r) if e[1] else r
    if tag == "like":
        r = None if s is None else ref_like(str(e[2]), str(s))
        return ref_not(r) if e[1] else r
    if tag == "between":
        v, lo, hi = (ref_num(x, env) for x in e[2:5])  # type: ignore[arg-type]
        r = AND_TABLE[ref_cmp("<=", lo, v), ref_cmp("<=", v, hi)]
        return ref_not(r) if e[1] else r
    if tag == "isnull":
        return (env[str(e[2])] is not None) if e[1] else (env[str(e[2])] is None)
    if tag == "flag":
        return env["f"]  # type: ignore[return-value]
    if tag == "const":
        return bool(e[1])
    if tag == "and":
        return AND_TABLE[ref_bool(e[1], env), ref_bool(e[2], env)]  # type: ignore[arg-type]
    if tag == "or":
        return OR_TABLE[ref_bool(e[1], env), ref_bool(e[2], env)]  # type: ignore[arg-type]
    return ref_not(ref_bool(e[1], env))  # type: ignore[arg-type]


@settings(deadline=None, max_examples=200)
@given(expr=bool_expr, a=num_value, b=num_value, s=str_value, f=bool_value)
def test_matches_reference_evaluation(expr: tuple[object, ...], a: object, b: object, s: object, f: object) -> None:
    env = {"a": a, "b": b, "s": s, "f": f}
    text = render(expr)
    selector = Selector(text)
    expected = ref_bool(expr, env)
    assert selector.evaluate({}, env) is expected, text
    assert selector.matches({}, env) is (expected is True), text
    assert selector.identifiers <= set(PROPS)
    assert re.sub(r"\s+", " ", selector.text) == re.sub(r"\s+", " ", text)
