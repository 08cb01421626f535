"""The brokers suite: jmsstore against RabbitMQ and ActiveMQ Classic, the
durable brokers Python users pick today, measured side by side.

``python -m bench brokers [--install] [--quick]``: the real brokers are
started for the run from Debian's packages (``--install`` apt-gets the
missing ones, as root; without it, what is installed is used), each as the
current user from its own scratch directories (data, logs, configuration),
bound to 127.0.0.1 on free ports, and stopped at the end, also on an error
or Ctrl-C (see :mod:`bench.peers.servers`, :mod:`bench.peers.rabbitmq`,
:mod:`bench.peers.activemq`). A broker that cannot be had gets rows that
say why.

Every measurement: 1 KiB messages on one durable queue (a fresh one per
measurement), P producer and P consumer threads, each its own connection
(ours: its own session), consumers acknowledging every message; the clock
runs from releasing the threads to the last receive
(:func:`bench.broker.drive`). Modes:

- ``persistent``: every send durable before it returns: ours ``send``
  (PERSISTENT), RabbitMQ a publisher confirm per message, ActiveMQ a
  receipt per SEND;
- ``batched``: durable sends confirmed in groups: ours ``send_async``
  (at most 128 outstanding per producer), RabbitMQ ``tx_commit`` per 100,
  ActiveMQ transactions of 100;
- ``non-persistent``: ours NON_PERSISTENT, RabbitMQ ``delivery_mode`` 1,
  ActiveMQ ``persistent:false``; no confirms.

CPU per message is the client process's (``getrusage``, every thread)
plus, for RabbitMQ and ActiveMQ, the broker processes' (``/proc/<pid>/stat``
of every process in the broker's sessions) over the same run, divided by
the messages received; ours runs inside the client process.

The measurements are interleaved: in every round each mode runs on each
system in turn (the order of the systems rotates by round). Rates and CPU
figures are medians over the rounds, with their ranges; "vs jmsstore" is
the median of the per-round quotients peer / ours.

After the rounds, each peer's durability is checked: persistent messages
are sent with a confirm/receipt each to a durable queue, the broker is
killed (SIGKILL to its process group) and started again on the same data,
and the messages are counted as they are received.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from jmsstore.bench import bodies
from jmsstore.bench.broker import drive, open_system
from jmsstore.bench.harness import Context, median, ratio
from jmsstore.bench.peers import activemq, debian, rabbitmq, servers
from jmsstore.table import cell

BODY_BYTES = 1024
MODES = ["persistent", "batched", "non-persistent"]
SYSTEMS = ["jmsstore", "rabbitmq", "activemq"]
PEERS = ["rabbitmq", "activemq"]
OURS_MODE = {"persistent": "persistent", "batched": "async", "non-persistent": "non-persistent"}
LABELS = {
    ("jmsstore", "persistent"): "send, PERSISTENT (durable on return)",
    ("jmsstore", "batched"): "send_async, PERSISTENT, 128 outstanding",
    ("jmsstore", "non-persistent"): "send, NON_PERSISTENT",
    **{("rabbitmq", m): label for m, label in rabbitmq.MODES.items()},
    **{("activemq", m): label for m, label in activemq.MODES.items()},
}
REASON_WIDTH = 110  # a table cell is cut here (a start-up error carries the log's tail); the JSON has it all
THREAD_COUNTS = [16]
QUICK_THREADS = [4]


def _peer_module(name: str) -> Any:
    return rabbitmq if name == "rabbitmq" else activemq


class Peers:
    """The real brokers of one run: found (or installed, if asked), started
    and, on the way out, always stopped.

    ``status[name]`` says what happened to each: ``available``, ``reason``
    (why not), ``start_s``, the ``listen`` addresses while running,
    ``settings``, and after the run ``stop`` (see :meth:`Server.stop`)."""

    def __init__(self, ctx: Context, names: list[str], install: bool) -> None:
        self.ctx = ctx
        self.names = names
        self.install = install
        self.servers: dict[str, servers.Server] = {}
        self.status: dict[str, dict[str, Any]] = {}
        self._stack = contextlib.ExitStack()
        self._old_term: Any = None

    def __enter__(self) -> Peers:
        if threading.current_thread() is threading.main_thread():
            # SIGTERM ends the run the way Ctrl-C does: through the finally blocks that stop the brokers
            self._old_term = signal.signal(signal.SIGTERM, _terminate)
        try:
            for name in self.names:
                self._bring_up(name)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _bring_up(self, name: str) -> None:
        module = _peer_module(name)
        st: dict[str, Any] = {"system": name, "available": False, "reason": None, "installed_now": False}
        self.status[name] = st
        why = module.missing()
        if why is not None and self.install and module.IMPORT_ERROR is None:
            self.ctx.step(f"{name}: installing Debian package(s) {', '.join(module.PACKAGES)}")
            failed = debian.install(list(module.PACKAGES), self.ctx.step)
            if failed is None:
                st["installed_now"] = True
                why = module.missing()
            else:
                why = f"{why}; --install failed: {failed}"
        elif why is not None and module.IMPORT_ERROR is None:
            why = f"{why}; run with --install (as root) to apt-get it"
        if why is not None:
            st["reason"] = why
            self.ctx.step(f"{name}: cannot run: {why}")
            return
        self.start(name, self.server_class(name)(self.ctx.scratch / f"server-{name}", self.ctx.step))

    def start(self, name: str, server: servers.Server) -> bool:
        """Starts ``server`` as ``name`` (stopped with the others at the end) and
        records in its status where it listens, or why it did not start."""
        st = self.status[name]
        self.servers[name] = server
        self._stack.callback(self._stop, name)
        self.ctx.step(f"{name}: starting ({server.root}, ports {server.ports})")
        try:
            st["start_s"] = server.start()
        except RuntimeError as e:
            st["reason"] = f"did not start: {e}"
            self.ctx.step(f"{name}: {st['reason']}")
            return False
        st["listen"] = servers.listen_addresses(list(server.ports.values()))
        st["loopback_only"] = servers.loopback_only(st["listen"])
        st["settings"] = server.settings()
        st["available"] = True
        self.ctx.step(f"{name}: up in {st['start_s']:.1f} s, listening on {', '.join(st['listen'])}")
        return True

    def server_class(self, name: str) -> type[servers.Server]:
        """The broker class started for ``name`` (the stomp suite starts their STOMP flavours)."""
        return rabbitmq.RabbitMQ if name == "rabbitmq" else activemq.ActiveMQ

    def _stop(self, name: str) -> None:
        server = self.servers[name]
        self.ctx.step(f"{name}: stopping")
        result = server.stop()
        result["ports"] = sorted(server.ports.values())
        self.status[name]["stop"] = result
        self.ctx.step(
            f"{name}: stopped={result['stopped']}, killed={result['killed'] or 'none'}, "
            f"listening after: {result['listening_after'] or 'nothing'}"
        )

    def __exit__(self, *exc: Any) -> None:
        try:
            self._stack.close()
        finally:
            if self._old_term is not None:
                signal.signal(signal.SIGTERM, self._old_term)
                self._old_term = None

    def available(self, name: str) -> bool:
        return bool(self.status.get(name, {}).get("available"))

    def reason(self, name: str) -> str:
        return str(self.status.get(name, {}).get("reason") or "not started")

    def client(self, name: str, mode: str, body: bytes, queue: str | None = None) -> servers.Client:
        server = self.servers[name]
        if isinstance(server, rabbitmq.RabbitMQ):
            return rabbitmq.RabbitMQClient(server, mode, body, queue)
        assert isinstance(server, activemq.ActiveMQ)
        return activemq.ActiveMQClient(server, mode, body, queue)


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


# --------------------------------------------------------------------------
# one measurement
# --------------------------------------------------------------------------


def measure(
    ctx: Context, peers: Peers, system: str, mode: str, threads: int, per_producer: int, body: bytes, cap: float
) -> dict[str, Any]:
    """One run of ``system`` in ``mode``: P producers + P consumers until every
    message sent is received; rate, counts and CPU per message (client +
    broker)."""
    out: dict[str, Any] = {"system": system, "mode": mode, "threads": threads}
    if system == "jmsstore":
        directory = ctx.scratch / f"jmsstore-{mode}-{threads}"
        shutil.rmtree(directory, ignore_errors=True)
        ours = open_system(OURS_MODE[mode], directory, body)
        try:
            run = drive(ours, threads, threads, per_producer, cap)
            run["remaining"] = ours.remaining()
            run["wrong_bodies"], run["send_errors"] = ours.wrong_bodies, ours.send_errors
        finally:
            ours.close()
            shutil.rmtree(directory, ignore_errors=True)
        broker_cpu = 0.0  # embedded: its CPU is the process's
    else:
        client = peers.client(system, mode, body)
        try:
            client.expect(2 * threads, threads * per_producer)
            run = drive(client, threads, threads, per_producer, cap)
            broker_cpu = client.broker_cpu_s() or 0.0
            run["remaining"] = client.remaining()
            run["wrong_bodies"], run["send_errors"] = client.wrong_bodies, client.send_errors
        finally:
            client.close()
    n = run["received"]
    out.update(run)
    out["client_cpu_s"] = run["cpu_s"]
    out["broker_cpu_s"] = broker_cpu
    out["client_cpu_us_per_message"] = run["cpu_s"] / n * 1e6 if n else None
    out["broker_cpu_us_per_message"] = broker_cpu / n * 1e6 if n else None
    out["cpu_us_per_message"] = (run["cpu_s"] + broker_cpu) / n * 1e6 if n else None
    return out


def survival(ctx: Context, peers: Peers, name: str, count: int, body: bytes) -> dict[str, Any]:
    """Send ``count`` persistent messages (each confirmed) to a durable queue,
    kill the broker (SIGKILL), start it again on the same data, and count
    what arrives."""
    queue = f"survive-{name}"
    out: dict[str, Any] = {"system": name, "sent": 0, "received_after_restart": 0}
    sender = peers.client(name, "persistent", body, queue)
    try:
        sender.expect(1, count)
        send, finish = sender.producer()
        try:
            for _ in range(count):
                send()
                out["sent"] += 1
        finally:
            finish()
    finally:
        sender.close(delete=False)
    server = peers.servers[name]
    ctx.step(f"durability: {name}: {out['sent']} persistent messages sent; kill -9 and restart")
    server.crash()
    out["restart_s"] = server.start()
    reader = peers.client(name, "persistent", body, queue)
    # Where the client can tell (RabbitMQ): was the durable queue there after the restart, and how full.
    out["found_after_restart"] = getattr(reader, "found_messages", "unknown")
    try:
        reader.expect(1, count)
        receive, close = reader.consumer()
        got, deadline = 0, time.monotonic() + 60
        try:
            while got < count and time.monotonic() < deadline:
                got += receive(0.5)
            # anything beyond: duplicates would show here
            extra_deadline = time.monotonic() + 1.0
            while time.monotonic() < extra_deadline:
                got += receive(0.2)
        finally:
            close()
        out["received_after_restart"] = got
        out["wrong_bodies"] = reader.wrong_bodies
        out["remaining"] = reader.remaining()
    finally:
        reader.close()
    out["survived"] = out["received_after_restart"] == out["sent"] == count and out["remaining"] == 0
    return out


# --------------------------------------------------------------------------
# the suite
# --------------------------------------------------------------------------


def spread(values: list[float | None]) -> tuple[float | None, float | None, float | None]:
    """Median, min and max of the values present (Nones if there are none)."""
    present = [v for v in values if v is not None]
    if not present:
        return None, None, None
    return median(present), min(present), max(present)


def _summarise(
    system: str, mode: str, threads: int, runs: list[dict[str, Any]], ours: list[dict[str, Any] | None]
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "system": system,
        "mode": mode,
        "threads": threads,
        "label": LABELS[(system, mode)],
        "rounds": runs,
    }
    ok = [r for r in runs if "error" not in r and "cannot" not in r]
    if not ok:
        first = runs[0] if runs else {}
        row["status"] = f"cannot: {first['cannot']}" if "cannot" in first else f"error: {first.get('error')}"
        row["rate"] = None
        return row
    row["status"] = "ok" if len(ok) == len(runs) else f"{len(runs) - len(ok)} round(s) failed"
    if any(r["timed_out"] or r["capped"] for r in ok):
        row["status"] = "capped"
    row["messages_per_run"] = ok[0]["planned"]
    row["sent"] = sum(r["sent"] for r in ok)
    row["received"] = sum(r["received"] for r in ok)
    row["rate"], row["rate_min"], row["rate_max"] = spread([r["rate"] for r in ok])
    for key in ("cpu_us_per_message", "client_cpu_us_per_message", "broker_cpu_us_per_message"):
        row[key], row[f"{key}_min"], row[f"{key}_max"] = spread([r[key] for r in ok])
    quotients = [
        ratio(r.get("rate"), o.get("rate"))
        for r, o in zip(runs, ours, strict=True)
        if "rate" in r and o is not None and "rate" in o
    ]
    cpu_quotients = [
        ratio(r.get("cpu_us_per_message"), o.get("cpu_us_per_message"))
        for r, o in zip(runs, ours, strict=True)
        if "rate" in r and o is not None and "rate" in o
    ]
    row["vs_jmsstore_rounds"] = quotients
    row["vs_jmsstore"], row["vs_jmsstore_min"], row["vs_jmsstore_max"] = spread(quotients)
    row["cpu_vs_jmsstore"] = median(cpu_quotients)
    return row


def interleaved_rounds(
    ctx: Context,
    systems: list[str],
    modes: list[str],
    rounds_n: int,
    measure_one: Callable[[str, str], dict[str, Any]],
    *,
    available: Callable[[str], bool],
    reason: Callable[[str], str],
    what: str,
    messages: int | Callable[[str], int],
    row: dict[str, Any],
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Runs ``measure_one(system, mode)`` in rounds: in each, every mode on
    every system in turn, the systems' order rotating by round, so that a
    machine's drift falls on all alike. A system that cannot be had gets
    its reason, a run that raises its error, in its row (with ``row``'s
    fields); the rounds go on."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {(s, m): [] for s in systems for m in modes}
    for i in range(rounds_n):
        order = systems[i % len(systems) :] + systems[: i % len(systems)]
        for mode in modes:
            for system in order:
                r: dict[str, Any]
                if not available(system):
                    r = {"system": system, "mode": mode, **row, "cannot": reason(system)}
                else:
                    count = messages(mode) if callable(messages) else messages
                    ctx.step(f"{what}, round {i + 1}/{rounds_n}: {mode}, {system}, {count:,} messages")
                    try:
                        r = measure_one(system, mode)
                    except Exception as e:  # reported in its row, the run goes on
                        r = {"system": system, "mode": mode, **row, "error": repr(e)}
                        ctx.note(f"{system} {mode} {what} round {i + 1}: {e!r}")
                runs[(system, mode)].append(r)
    return runs


def run(ctx: Context) -> None:
    only = ctx.options.get("only") or []
    unknown = sorted(set(only) - set(SYSTEMS) - set(MODES))
    if unknown:
        raise SystemExit(f"unknown name(s) {unknown}; the brokers suite has systems {SYSTEMS} and modes {MODES}")
    systems = [s for s in SYSTEMS if s in only] or list(SYSTEMS)
    modes = [m for m in MODES if m in only] or list(MODES)
    counts = ctx.options.get("threads") or (QUICK_THREADS if ctx.quick else THREAD_COUNTS)
    n = ctx.n(400, 10_000, minimum=max(counts))
    rounds_n = 1 if ctx.quick else 5
    cap = 20.0 if ctx.quick else 60.0
    keep = ctx.n(20, 200, minimum=5)
    body = bodies.random_body(BODY_BYTES, seed=7)
    install = bool(ctx.options.get("install"))
    ctx.settings["brokers"] = {
        "body_bytes": BODY_BYTES,
        "messages": n,
        "messages_per_thread_count": {str(t): n // t * t for t in counts},
        "thread_counts": counts,
        "consumers": "as many as producers; every thread its own connection (ours: its own session)",
        "systems": systems,
        "modes": modes,
        "labels": {f"{s}/{m}": LABELS[(s, m)] for s in systems for m in modes},
        "rounds": rounds_n,
        "measurement_cap_s": cap,
        "install": install,
        "durability_messages": keep,
        "ours": "one JMSServer (direct-write) per measurement, AUTO acknowledge, messages_maximum 128",
        "cpu": "client process (getrusage RUSAGE_SELF, every thread) + broker processes (/proc/<pid>/stat utime + "
        "stime of every process of the broker's sessions), from releasing the threads to the last receive, per "
        "message received",
        "method": "per thread count, rounds; in each round every mode on every system in turn (the systems' order "
        "rotates by round); medians over the rounds with min-max ranges; vs jmsstore: median of per-round quotients",
    }
    peer_names = [s for s in systems if s in PEERS]
    rows: list[dict[str, Any]] = []
    durability: list[dict[str, Any]] = []
    peers = Peers(ctx, peer_names, install)
    try:
        with peers:
            for threads in counts:
                per = n // threads

                def one(system: str, mode: str, threads: int = threads, per: int = per) -> dict[str, Any]:
                    return measure(ctx, peers, system, mode, threads, per, body, cap)

                runs = interleaved_rounds(
                    ctx,
                    systems,
                    modes,
                    rounds_n,
                    one,
                    available=lambda system: system not in PEERS or peers.available(system),
                    reason=peers.reason,
                    what=f"{threads}+{threads} threads",
                    messages=per * threads,
                    row={"threads": threads},
                )
                for mode in modes:
                    ours_runs: list[dict[str, Any] | None] = [None] * rounds_n
                    if ("jmsstore", mode) in runs:
                        ours_runs = list(runs[("jmsstore", mode)])
                    for system in systems:
                        rows.append(_summarise(system, mode, threads, runs[(system, mode)], ours_runs))
            for name in peer_names:
                if not peers.available(name):
                    durability.append({"system": name, "cannot": peers.reason(name)})
                    continue
                try:
                    durability.append(survival(ctx, peers, name, keep, body))
                except Exception as e:
                    durability.append({"system": name, "error": repr(e)})
                    ctx.note(f"durability check of {name}: {e!r}")
    finally:
        ctx.results["brokers"] = {
            "rows": rows,
            "servers": peers.status,
            "durability": durability,
        }
    _report(ctx, rows, peers, durability, rounds_n)


def _found(found: Any) -> Any:
    """What the durability table says of the queue found after a restart."""
    if found is None:
        return "no queue"
    return "-" if found == "unknown" else found


def range_text(low: Any, high: Any, digits: int = 0) -> str:
    """``low-high`` for a table's range column ('' when they are one value or missing)."""
    if low is None or high is None or low == high:
        return ""
    return f"{low:,.{digits}f}-{high:,.{digits}f}"


def servers_table(ctx: Context, peers: Peers) -> None:
    """The brokers of a run: version, whether they ran (or why not), where
    they listened and how they stopped (shown once they have stopped)."""
    servers_rows = []
    for name, st in peers.status.items():
        stop = st.get("stop") or {}
        servers_rows.append(
            [
                name,
                (st.get("settings") or {}).get("version") or "-",
                "ran" if st["available"] else cell(f"cannot: {st['reason']}", REASON_WIDTH),
                st.get("start_s"),
                ", ".join(st.get("listen") or []) or "-",
                stop.get("stopped"),
                ", ".join(map(str, stop.get("listening_after") or [])) or ("nothing" if stop else "-"),
            ]
        )
    if servers_rows:
        ctx.table(
            "Real brokers (started for this run from scratch directories, stopped at its end)",
            ["broker", "version", "status", "start s", "listening on", "stopped", "listening after"],
            servers_rows,
        )


def _report(
    ctx: Context, rows: list[dict[str, Any]], peers: Peers, durability: list[dict[str, Any]], rounds_n: int
) -> None:
    servers_table(ctx, peers)
    ctx.table(
        "Against RabbitMQ and ActiveMQ: 1 KiB, durable queue, P producers + P consumers, every message acknowledged",
        [
            "threads",
            "mode",
            "system",
            "msg/s",
            "range",
            "vs jmsstore",
            "CPU us/msg",
            "range",
            "client",
            "broker",
            "how",
        ],
        [
            [
                r["threads"],
                r["mode"],
                r["system"],
                r.get("rate"),
                range_text(r.get("rate_min"), r.get("rate_max")),
                r.get("vs_jmsstore"),
                r.get("cpu_us_per_message"),
                range_text(r.get("cpu_us_per_message_min"), r.get("cpu_us_per_message_max")),
                r.get("client_cpu_us_per_message"),
                r.get("broker_cpu_us_per_message"),
                r["label"] if r["status"] == "ok" else cell(r["status"], REASON_WIDTH),
            ]
            for r in rows
        ],
        footer="\n".join(
            [
                "vs jmsstore: rate / ours in the same round and mode (median of the per-round quotients);",
                "CPU us/msg: client process + broker processes over the run, per message received (ours: the one "
                "process);",
                f"{rounds_n} round(s), medians; ranges min-max over the rounds.",
            ]
        ),
    )
    if durability:
        ctx.table(
            "Durability: persistent messages, broker killed (SIGKILL) and restarted on the same data",
            [
                "broker",
                "sent",
                "on the queue at restart",
                "received after restart",
                "left on queue",
                "restart s",
                "survived",
            ],
            [
                [
                    d["system"],
                    d.get("sent"),
                    _found(d.get("found_after_restart")),
                    d.get("received_after_restart"),
                    d.get("remaining"),
                    d.get("restart_s"),
                    d.get("survived") if "cannot" not in d and "error" not in d else d.get("cannot") or d.get("error"),
                ]
                for d in durability
            ],
        )
