"""Plain text tables, the one printer of the ``jmsstore`` command, the
benchmarks and the Spark loader's reports.

Two shapes: :func:`format_table` (columns and rows: numbers right-aligned,
text left-aligned, a rule under the header) and :func:`format_fields` (a
title and one ``name  value`` line per field). Both return the text without
a final newline; :func:`cell` is how either turns a value into text. No
colour and no box drawing: the output reads the same in a terminal, a log
file and a pipe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

__all__ = ["cell", "format_fields", "format_table"]


def cell(value: object, max_width: int | None = None, *, group_digits: bool = True) -> str:
    """``value`` as table text: ``-`` for None, ``yes``/``no`` for a bool,
    an int thousands separated (plain with ``group_digits=False``, for
    identifiers such as offsets and handles), a float to four significant
    digits (whole from 10,000),
    a list or tuple as its items joined by ``, ``, a dict as ``k=v`` pairs.
    Longer than ``max_width``: cut, ending in ``...``."""
    if value is None:
        text = "-"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, int):
        text = f"{value:,}" if group_digits else str(value)
    elif isinstance(value, float):
        if 1e4 <= abs(value) < 1e15:
            text = f"{value:,.0f}" if group_digits else f"{value:.0f}"
        else:
            text = f"{value:.4g}"
    elif isinstance(value, (list, tuple)):
        text = ", ".join(cell(v, group_digits=group_digits) for v in value)
    elif isinstance(value, dict):
        text = ", ".join(f"{k}={cell(v, group_digits=group_digits)}" for k, v in value.items())
    else:
        text = str(value)
    text = " ".join(text.splitlines())  # one line per row, always
    if max_width is not None and len(text) > max_width:
        text = text[: max(max_width - 3, 0)] + "..."
    return text


def _numeric(text: str) -> bool:
    """True for a number as :func:`cell` or a caller writes one: ``1,234``,
    ``-0.5``, ``2.1x``, ``45%``."""
    t = text.replace(",", "").removesuffix("x").removesuffix("%").strip()
    if not t:
        return False
    try:
        float(t)
    except ValueError:
        return False
    return True


def format_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    title: str | None = None,
    max_width: int | None = None,
    notes: Iterable[str] = (),
    group_digits: bool = True,
) -> str:
    """A table: ``title`` (if any), the column names, a rule, one line per
    row, then ``notes`` one per line. Cells go through :func:`cell` (strings
    stay as they are, up to ``max_width``; ``group_digits`` as there); a cell
    that reads as a number is right-aligned, any other left-aligned.
    Trailing spaces are stripped."""
    cells = [[cell(v, max_width, group_digits=group_digits) for v in row] for row in rows]
    for row in cells:
        if len(row) != len(columns):
            raise ValueError(f"a row has {len(row)} cells for {len(columns)} columns: {row!r}")
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def line(values: Sequence[str], align_numbers: bool) -> str:
        out = [v.rjust(w) if align_numbers and _numeric(v) else v.ljust(w) for v, w in zip(values, widths, strict=True)]
        return "  ".join(out).rstrip()

    lines = [] if title is None else [title]
    lines.append(line(columns, False))
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(line(r, True) for r in cells)
    lines.extend(notes)
    return "\n".join(lines)


def format_fields(
    title: str | None, fields: Mapping[str, object], *, max_width: int | None = None, group_digits: bool = True
) -> str:
    """``title`` (if any), then one line per field, indented: its name
    padded to the longest name, two spaces, its value as :func:`cell` writes it."""
    width = max((len(k) for k in fields), default=0)
    lines = [] if title is None else [title]
    lines.extend(f"  {k:<{width}}  {cell(v, max_width, group_digits=group_digits)}".rstrip() for k, v in fields.items())
    return "\n".join(lines)
