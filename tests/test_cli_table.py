"""The one table printer (``jmsstore.table``) and the progress bar
(``jmsstore.progress``) of the command, the benchmarks and the Spark reports."""

from __future__ import annotations

import io

import pytest
from jmsstore import progress
from jmsstore.progress import OpeningProgress, ProgressBar
from jmsstore.table import cell, format_fields, format_table


def test_cells() -> None:
    assert cell(None) == "-"
    assert cell(True) == "yes" and cell(False) == "no"
    assert cell(1234567) == "1,234,567"
    assert cell(0.123456) == "0.1235" and cell(52746.3) == "52,746"
    assert cell([1, "a"]) == "1, a" and cell({"segment": 2, "at": 80}) == "segment=2, at=80"
    assert cell("two\nlines") == "two lines"
    assert cell("abcdefghij", max_width=6) == "abc..."
    # Identifiers (offsets, handles) without separators.
    assert cell(1234567, group_digits=False) == "1234567" and cell([80, 65536], group_digits=False) == "80, 65536"
    assert format_table(["offset"], [[65536]], group_digits=False).splitlines()[-1] == " 65536"


def test_table_aligns_numbers_right_and_text_left() -> None:
    text = format_table(
        ["what", "msg/s", "ratio"],
        [["store", 1234.0, "2.50x"], ["sqlite3 queue", 12, None]],
        title="== throughput",
        notes=["   ratios from one run"],
    )
    assert text.splitlines() == [
        "== throughput",
        "what           msg/s  ratio",
        "-------------  -----  -----",
        "store           1234  2.50x",
        "sqlite3 queue     12  -",
        "   ratios from one run",
    ]


def test_table_without_rows_and_with_cut_cells() -> None:
    assert format_table(["a", "b"], []) == "a  b\n-  -"
    text = format_table(["name"], [["x" * 60]], max_width=10)
    assert text.splitlines()[-1] == "xxxxxxx..."
    with pytest.raises(ValueError, match="2 cells for 1 columns"):
        format_table(["one"], [[1, 2]])


def test_fields() -> None:
    assert format_fields("store", {"records": 20, "live ratio": 0.5, "torn tail": None}).splitlines() == [
        "store",
        "  records     20",
        "  live ratio  0.5",
        "  torn tail   -",
    ]
    assert format_fields(None, {}) == ""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(progress.time, "monotonic", c)
    return c


def test_progress_shows_rate_and_eta(clock: Clock) -> None:
    out = io.StringIO()
    bar = ProgressBar("recovering", stream=out, log_every=0)
    for step in range(1, 5):
        clock.now += 1.0
        bar(step << 20, 8 << 20)  # 1 MiB/s
    clock.now += 4.0
    bar(8 << 20, 8 << 20)
    bar(8 << 20, 8 << 20)  # once finished, said once
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "recovering:  12.5% 1.0 MiB/8.0 MiB, 1.0 MiB/s, ETA 0:07"
    assert lines[3] == "recovering:  50.0% 4.0 MiB/8.0 MiB, 1.0 MiB/s, ETA 0:04"
    assert lines[4] == "recovering: 100% 8.0 MiB in 8.0 s (1.0 MiB/s)"
    assert len(lines) == 5


def test_progress_on_a_terminal_redraws_in_place_at_most_ten_times_a_second(clock: Clock) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    bar = ProgressBar("compacting", stream=out)
    for step in range(1, 101):
        clock.now += 0.01
        bar(step, 200)
    clock.now += 1.0
    bar(200, 200)
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 11  # every 0.1 s, and the end
    assert "ETA" in text and text.endswith("\n")
    # The last line is padded to cover the longer one it replaces.
    assert text.split("\r")[-1].rstrip() == "[########################] compacting: 100% 200 B in 2.0 s (100 B/s)"


def test_progress_stages_count_from_the_previous_stage(clock: Clock) -> None:
    out = io.StringIO()
    stages = OpeningProgress(stream=out)
    clock.now += 10.0
    stages("store", 100, 100)
    stages("messages", 0, 0)  # nothing to load: nothing said
    clock.now += 2.0
    stages("messages", 50, 50)
    stages.close()
    assert out.getvalue().splitlines() == [
        "recovering the store: 100% 100 B in 10.0 s (10 B/s)",
        "loading messages: 100% 50 messages in 2.0 s (25 messages/s)",
    ]
