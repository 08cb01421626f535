"""Counters of a STOMP server: connections, frames by command, errors."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Protocol

__all__ = ["FrameCounts", "StompStatistics"]


class _ReceiptCounter(Protocol):
    def statistics(self) -> dict[str, int]: ...


class _SendCounter(Protocol):
    @property
    def taken(self) -> int: ...


class _AckCounter(Protocol):
    @property
    def settled(self) -> int: ...


class FrameCounts:
    """One connection's frames in and out, by command, kept without a lock:
    its reader alone counts the frames in that Python handles, and frames
    out are counted under its write lock; RECEIPTs (but DISCONNECT's) by
    the connection's outbox, which writes them from native threads too, and
    the SENDs and ACKs its lanes take by the lanes, which its reader may
    run without Python for a while. (One server-wide lock taken for every
    frame was contended by every connection's threads.)"""

    __slots__ = ("_acks", "_receipts", "_sends", "incoming", "native_reads", "outgoing")

    def __init__(self) -> None:
        self.incoming: dict[str, int] = {}
        self.outgoing: dict[str, int] = {}
        self.native_reads = 0  # reads of the socket made without Python (counted when it is given back)
        self._receipts: _ReceiptCounter | None = None
        self._sends: _SendCounter | None = None
        self._acks: _AckCounter | None = None

    def count_receipts(self, outbox: _ReceiptCounter) -> None:
        """The RECEIPT frames ``outbox`` writes, and the MESSAGE frames native
        dispatchers write through it, count as frames out."""
        self._receipts = outbox

    def count_lanes(self, sends: _SendCounter, acks: _AckCounter) -> None:
        """The SEND frames ``sends`` takes and the ACK frames ``acks``
        settles count as frames in."""
        self._sends = sends
        self._acks = acks

    def receipts_direct(self) -> int:
        """RECEIPTs written by the thread that learnt their SEND was durable."""
        return self._receipts.statistics()["receipts_direct"] if self._receipts is not None else 0

    def native_messages(self) -> tuple[int, int]:
        """MESSAGE frames written by the broker core's dispatchers, and the writes they took."""
        if self._receipts is None:
            return 0, 0
        written = self._receipts.statistics()
        return written["messages"], written["message_writes"]

    def frames_in(self) -> tuple[dict[str, int], int, int]:
        """The frames in by command (a copy, taken in one step), with the
        SENDs and the ACKs among them that the lanes took (each read once,
        so that the three agree)."""
        incoming = dict(self.incoming)
        sends = self._sends.taken if self._sends is not None else 0
        acks = self._acks.settled if self._acks is not None else 0
        for command, count in (("SEND", sends), ("ACK", acks)):
            if count:
                incoming[command] = incoming.get(command, 0) + count
        return incoming, sends, acks

    def frames_out(self) -> dict[str, int]:
        """The frames out by command (a copy, taken in one step)."""
        out = dict(self.outgoing)
        if self._receipts is not None:
            written = self._receipts.statistics()
            # The RECEIPTs it wrote, and the MESSAGE frames native dispatchers wrote through it.
            for command, key in (("RECEIPT", "receipts"), ("MESSAGE", "messages")):
                if written[key]:
                    out[command] = out.get(command, 0) + written[key]
        return out

    def frame_in(self, command: str, count: int = 1) -> None:
        self.incoming[command] = self.incoming.get(command, 0) + count

    def frame_out(self, command: str, count: int = 1) -> None:
        self.outgoing[command] = self.outgoing.get(command, 0) + count


class StompStatistics:
    """Thread-safe counters; :meth:`snapshot` gives them as plain data.
    Frames are counted per connection (:meth:`frame_counts`) and summed
    here, those of closed connections once they are retired."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.connections_open = 0
        self.connections_total = 0
        self.connections_refused = 0
        self.heartbeat_timeouts = 0
        self.timeouts = 0
        self.logins_failed = 0
        self._frames_in: Counter[str] = Counter()
        self._frames_out: Counter[str] = Counter()
        self._native_sends = 0
        self._native_acks = 0
        self._native_reads = 0
        self._receipts_direct = 0
        self._native_messages = 0
        self._native_message_writes = 0
        self._live: set[FrameCounts] = set()

    def frame_counts(self) -> FrameCounts:
        """The frame counters of a new connection, counted from now on."""
        counts = FrameCounts()
        with self._lock:
            self._live.add(counts)
        return counts

    def retire(self, counts: FrameCounts) -> None:
        """A connection closed: its frames join the totals."""
        with self._lock:
            if counts in self._live:
                self._live.discard(counts)
                incoming, sends, acks = counts.frames_in()
                self._frames_in.update(incoming)
                self._frames_out.update(counts.frames_out())
                self._native_sends += sends
                self._native_acks += acks
                self._native_reads += counts.native_reads
                self._receipts_direct += counts.receipts_direct()
                messages, writes = counts.native_messages()
                self._native_messages += messages
                self._native_message_writes += writes

    def opened(self) -> None:
        with self._lock:
            self.connections_open += 1
            self.connections_total += 1

    def closed(self) -> None:
        with self._lock:
            self.connections_open -= 1

    def refused(self) -> None:
        with self._lock:
            self.connections_refused += 1

    def heartbeat_timeout(self) -> None:
        with self._lock:
            self.heartbeat_timeouts += 1

    def login_failed(self) -> None:
        with self._lock:
            self.logins_failed += 1

    def timed_out(self) -> None:
        with self._lock:
            self.timeouts += 1

    def snapshot(self, subscriptions: int, buffered_bytes: int) -> dict[str, Any]:
        with self._lock:
            frames_in = Counter(self._frames_in)
            frames_out = Counter(self._frames_out)
            native_sends = self._native_sends
            native_acks = self._native_acks
            native_reads = self._native_reads + sum(counts.native_reads for counts in self._live)
            receipts_direct = self._receipts_direct + sum(counts.receipts_direct() for counts in self._live)
            native_messages, native_message_writes = self._native_messages, self._native_message_writes
            for counts in self._live:
                messages, writes = counts.native_messages()
                native_messages += messages
                native_message_writes += writes
            for counts in self._live:
                # Copied first (in one step): the connection's threads may be counting.
                incoming, sends, acks = counts.frames_in()
                frames_in.update(incoming)
                native_sends += sends
                native_acks += acks
                frames_out.update(counts.frames_out())
            return {
                "connections_open": self.connections_open,
                "connections_total": self.connections_total,
                "connections_refused": self.connections_refused,
                "errors": frames_out.get("ERROR", 0),
                "heartbeat_timeouts": self.heartbeat_timeouts,
                "timeouts": self.timeouts,
                "logins_failed": self.logins_failed,
                "subscriptions": subscriptions,
                "buffered_bytes": buffered_bytes,
                "frames_in": {str(command): n for command, n in frames_in.items()},
                "frames_out": {str(command): n for command, n in frames_out.items()},
                "native_sends": native_sends,
                "native_acks": native_acks,
                "native_reads": native_reads,
                "receipts_direct": receipts_direct,
                "native_messages": native_messages,
                "native_message_writes": native_message_writes,
            }
