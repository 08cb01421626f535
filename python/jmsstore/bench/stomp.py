"""The stomp suite: ``jmsstore serve`` against ActiveMQ Classic and RabbitMQ
(its STOMP plugin), the same client code for all three, over loopback.

``python -m bench stomp [--install] [--quick] [--client stomp.py|native|both]``: the three servers are
started for the run, each as a process of its own on 127.0.0.1 from
scratch directories, and always stopped at its end (also on an error or
Ctrl-C); ``--install`` apt-gets the missing Debian packages (root), and a
broker that cannot be had gets rows that say why
(:mod:`bench.peers.stomp_servers` describes the servers and the client).

Every measurement: 1 KiB bodies on a fresh ``/queue/NAME``, P producers
and P consumers (P = 1, 4, 16; quick: 1, 4), each its own STOMP
connection; consumers ``client-individual``, an ACK per message,
prefetch 128; the clock runs from releasing the threads to the last
receive (:func:`bench.broker.drive`). Modes: ``persistent`` (a receipt per
SEND, waited for) and ``non-persistent`` (no receipts).

Two clients send the same frames (``--client``, default both):
``stomp.py``, the Python library the issue names, whose process costs
40-240 µs of CPU per message on Python threads that share one core, so
that against a fast server the client sets the pace; and ``native``,
``jmsstore-stomp-load`` (:mod:`bench.peers.stomp_load`), native threads
costing a few µs per message, built with cargo from this checkout, so
that the servers set it. The goals are reported for each.

CPU per message is the server process's (``/proc/<pid>/stat`` utime +
stime: the ``jmsstore serve`` process, RabbitMQ's ``beam.smp``,
ActiveMQ's ``java``) from releasing the threads to the last receive,
divided by the messages received; the client process's (all three use
the same stomp.py code in it) is reported beside it.

Rounds are interleaved: in every round each mode runs on each server in
turn, the servers' order rotating by round. Rates and CPU are medians over
the rounds with their ranges; "vs jmsstore" is the median of the per-round
quotients peer / ours, and the goal is ours over the faster peer of the
same round, at least 2, with less server CPU per message than either.

``JMSSTORE_BENCH_STOMP_BASELINE=DIR`` adds a fourth server,
``jmsstore-baseline``: ``jmsstore serve`` run with ``PYTHONPATH=DIR`` (the
``python`` directory of another checkout, with its native module built),
to compare a change with the code before it in the same run.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

from jmsstore.bench import bodies
from jmsstore.bench.broker import drive
from jmsstore.bench.brokers import REASON_WIDTH, Peers, interleaved_rounds, range_text, servers_table, spread
from jmsstore.bench.harness import REPO_DIR, Context, median, ratio
from jmsstore.bench.peers import servers, stomp_load, stomp_servers
from jmsstore.table import cell

BODY_BYTES = 1024
MODES = list(stomp_servers.MODES)
SYSTEMS = ["jmsstore", "rabbitmq", "activemq"]
PEERS = ["rabbitmq", "activemq"]
BASELINE = "jmsstore-baseline"
PRODUCER_COUNTS = [1, 4, 16]
QUICK_PRODUCERS = [1, 4]
GOAL_RATIO = 2.0
CLIENTS = ["stomp.py", "native"]
# The native client moves this many times the messages per run: its runs
# are that much shorter, and CPU is counted in 10 ms ticks.
NATIVE_MESSAGES = 3
# Non-persistent, this many times: a run of 3x took about a tenth of a
# second on our server, where connecting and subscribing weighed on the rate.
NATIVE_NON_PERSISTENT_MESSAGES = 10


def native_messages(n: int, mode: str) -> int:
    """The messages a native client's run moves in ``mode`` where a stomp.py run moves ``n``."""
    return n * (NATIVE_NON_PERSISTENT_MESSAGES if mode == "non-persistent" else NATIVE_MESSAGES)


class StompPeers(Peers):
    """The servers of one run, started (installed first, if asked) and always stopped:
    :class:`bench.brokers.Peers` with the STOMP flavour of each."""

    def __init__(self, ctx: Context, names: list[str], install: bool, baseline: str | None = None) -> None:
        super().__init__(ctx, names, install)
        self.baseline = baseline

    def server_class(self, name: str) -> type[servers.Server]:
        return stomp_servers.RabbitMQStomp if name == "rabbitmq" else stomp_servers.ActiveMQStomp

    def _bring_up(self, name: str) -> None:
        if name in PEERS:
            super()._bring_up(name)
            return
        st: dict[str, Any] = {"system": name, "available": False, "reason": None, "installed_now": False}
        self.status[name] = st
        if stomp_servers.IMPORT_ERROR is not None:
            st["reason"] = stomp_servers.IMPORT_ERROR
            return
        server = stomp_servers.JmsstoreServe(self.ctx.scratch / f"server-{name}", self.ctx.step)
        if name == BASELINE:
            assert self.baseline is not None
            base = self.baseline
            plain = server.processes

            def processes() -> list[tuple[str, list[str], dict[str, str], int]]:
                return [(w, argv, {**env, "PYTHONPATH": base}, p) for w, argv, env, p in plain()]

            server.processes = processes  # type: ignore[method-assign]
        if self.start(name, server) and name == BASELINE:
            st["settings"]["pythonpath"] = self.baseline


def measure_native(
    peers: StompPeers, system: str, mode: str, producers: int, per: int, body: bytes, cap: float, tool: NativeTool
) -> Any:
    """One run of the compiled client: P producers + P consumers until every message sent is received."""
    if tool.binary is None:
        return {"system": system, "mode": mode, "client": "native", "cannot": tool.reason}
    server = peers.servers[system]
    client = stomp_servers.StompClient(server, mode, body)  # its fresh queue, and what is left on it afterwards
    run = stomp_load.run(
        tool.binary,
        port=client.port,
        destination=client.destination,
        mode=mode,
        producers=producers,
        consumers=producers,
        messages=producers * per,
        body_file=tool.body_file,
        prefetch=stomp_servers.PREFETCH,
        cap=cap,
        server_cpu_seconds=server.cpu_seconds,
        login=stomp_servers.LOGIN,
    )
    run["remaining"] = client.remaining()
    run["send_errors"] = 0  # a send that failed ends the tool's run with an error instead
    n = run["received"]
    run.update(
        system=system,
        mode=mode,
        client="native",
        client_cpu_s=run["cpu_s"],
        server_cpu_us_per_message=run["server_cpu_s"] / n * 1e6 if n else None,
        client_cpu_us_per_message=run["cpu_s"] / n * 1e6 if n else None,
    )
    return run


class NativeTool:
    """The compiled client of a run: its binary (None: ``reason`` says why
    not) and the file of the body it sends and checks."""

    def __init__(self, ctx: Context, body: bytes, wanted: bool) -> None:
        self.binary: Path | None = None
        self.reason = "not asked for (--client)"
        self.body_file = ctx.scratch / "stomp-body.bin"
        self.build: dict[str, Any] = {}
        if not wanted:
            return
        self.body_file.write_bytes(body)
        ctx.step(f"building {stomp_load.CRATE} (cargo build --release -p {stomp_load.CRATE})")
        self.build = stomp_load.build(REPO_DIR, timeout=300)
        if self.build["status"] == "unavailable":
            self.reason = f"{stomp_load.CRATE} cannot be built: {self.build['build_error']}"
        else:
            self.binary = Path(self.build["binary"])
            if self.build["status"] == "stale":
                ctx.note(f"{stomp_load.CRATE}: the build failed ({self.build['build_error']}), using the old binary")


def measure(peers: StompPeers, system: str, mode: str, producers: int, per: int, body: bytes, cap: float) -> Any:
    """One run of the stomp.py client: P producers + P consumers until every message sent is received."""
    client = stomp_servers.StompClient(peers.servers[system], mode, body)
    client.expect(2 * producers, producers * per)
    run = drive(client, producers, producers, per, cap)
    server_cpu = client.broker_cpu_s() or 0.0
    run["remaining"] = client.remaining()
    run["wrong_bodies"], run["send_errors"] = client.wrong_bodies, client.send_errors
    n = run["received"]
    run.update(
        system=system,
        mode=mode,
        client="stomp.py",
        server_cpu_s=server_cpu,
        client_cpu_s=run["cpu_s"],
        server_cpu_us_per_message=server_cpu / n * 1e6 if n else None,
        client_cpu_us_per_message=run["cpu_s"] / n * 1e6 if n else None,
    )
    return run


def _summarise(
    system: str, mode: str, client: str, producers: int, runs: list[dict[str, Any]], ours: list[Any]
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "system": system,
        "mode": mode,
        "client": client,
        "producers": producers,
        "consumers": producers,
    }
    row["rounds"] = runs
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
    row["remaining"] = sum(r["remaining"] for r in ok)
    row["wrong_bodies"] = sum(r["wrong_bodies"] for r in ok)
    row["rate"], row["rate_min"], row["rate_max"] = spread([r["rate"] for r in ok])
    for key in ("server_cpu_us_per_message", "client_cpu_us_per_message"):
        row[key], row[f"{key}_min"], row[f"{key}_max"] = spread([r[key] for r in ok])
    pairs = [(r, o) for r, o in zip(runs, ours, strict=True) if "rate" in r and o is not None and "rate" in o]
    row["vs_jmsstore_rounds"] = [ratio(r["rate"], o["rate"]) for r, o in pairs]
    row["vs_jmsstore"], row["vs_jmsstore_min"], row["vs_jmsstore_max"] = spread(row["vs_jmsstore_rounds"])
    row["server_cpu_vs_jmsstore"] = median(
        [ratio(r["server_cpu_us_per_message"], o["server_cpu_us_per_message"]) for r, o in pairs]
    )
    return row


def run(ctx: Context) -> None:
    only = ctx.options.get("only") or []
    baseline = os.environ.get("JMSSTORE_BENCH_STOMP_BASELINE") or None
    known = [*SYSTEMS, *([BASELINE] if baseline else [])]
    unknown = sorted(set(only) - set(known) - set(MODES))
    if unknown:
        raise SystemExit(f"unknown name(s) {unknown}; the stomp suite has servers {known} and modes {MODES}")
    systems = [s for s in known if s in only] or list(known)
    if "jmsstore" not in systems:
        systems.insert(0, "jmsstore")  # the quotients need ours
    modes = [m for m in MODES if m in only] or list(MODES)
    clients = ctx.options.get("clients") or list(CLIENTS)
    counts = ctx.options.get("threads") or (QUICK_PRODUCERS if ctx.quick else PRODUCER_COUNTS)
    n = ctx.n(200, 4000, minimum=max(counts))
    rounds_n = 1 if ctx.quick else 3
    cap = 20.0 if ctx.quick else 60.0
    body = bodies.random_body(BODY_BYTES, seed=7)
    install = bool(ctx.options.get("install"))
    ctx.settings["stomp"] = {
        "body_bytes": BODY_BYTES,
        "messages": n,
        "messages_per_producer_count": {str(p): n // p * p for p in counts},
        "native_messages_per_producer_count": {str(p): native_messages(n, "persistent") // p * p for p in counts},
        "native_non_persistent_messages_per_producer_count": {
            str(p): native_messages(n, "non-persistent") // p * p for p in counts
        },
        "producer_counts": counts,
        "consumers": "as many as producers; every producer and consumer its own STOMP connection",
        "client": f"stomp.py {stomp_servers.client_version()}, STOMP 1.2, the same code for every server",
        "clients": clients,
        "native_client": f"{stomp_load.CRATE} (rust/{stomp_load.CRATE}): native threads, the same frames",
        "ack": f"client-individual, an ACK per message, prefetch {stomp_servers.PREFETCH} (activemq.prefetchSize "
        "and prefetch-count)",
        "systems": systems,
        "modes": {m: stomp_servers.MODES[m] for m in modes},
        "rounds": rounds_n,
        "measurement_cap_s": cap,
        "install": install,
        "baseline_pythonpath": baseline,
        "cpu": "server process only (/proc/<pid>/stat utime + stime: jmsstore serve's python, RabbitMQ's "
        "beam.smp, ActiveMQ's java), from releasing the threads to the last receive, per message received; the "
        "client process's (getrusage) beside it",
        "method": "per producer count, rounds; in each round every mode on every server in turn (the order "
        "rotates by round); medians over the rounds with min-max ranges; vs jmsstore: median of per-round "
        "quotients",
        "goal": f"jmsstore >= {GOAL_RATIO:g}x the faster peer of the round at every producer count, and less "
        "server CPU per message than either (for each client)",
    }
    tool = NativeTool(ctx, body, "native" in clients)
    ctx.settings["stomp"]["native_build"] = tool.build
    peer_names = [s for s in systems if s in PEERS]
    rows: list[dict[str, Any]] = []
    peers = StompPeers(ctx, systems, install, baseline)
    try:
        with peers:
            for producers in counts:
                for client in clients:
                    runs = _rounds(ctx, peers, systems, modes, client, producers, n, body, cap, rounds_n, tool)
                    for mode in modes:
                        ours = list(runs[("jmsstore", mode)])
                        for system in systems:
                            rows.append(_summarise(system, mode, client, producers, runs[(system, mode)], ours))
    finally:
        ctx.results["stomp"] = {"rows": rows, "servers": peers.status}
    _goals(ctx, rows, peer_names, counts, modes)
    _report(ctx, rows, peers, rounds_n)


def _rounds(
    ctx: Context,
    peers: StompPeers,
    systems: list[str],
    modes: list[str],
    client: str,
    producers: int,
    n: int,
    body: bytes,
    cap: float,
    rounds_n: int,
    tool: NativeTool,
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The rounds of one producer count and client (:func:`bench.brokers.interleaved_rounds`):
    ``n`` messages a stomp.py run (more a native run: :func:`native_messages`)."""

    def one(system: str, mode: str) -> dict[str, Any]:
        r: dict[str, Any]
        if client == "native":
            per = native_messages(n, mode) // producers
            r = measure_native(peers, system, mode, producers, per, body, cap, tool)
        else:
            r = measure(peers, system, mode, producers, n // producers, body, cap)
        if "cannot" not in r:
            ctx.step(
                f"  {r['received']:,} received, {r['rate']:,.0f} msg/s, server "
                f"{r['server_cpu_us_per_message'] or 0:.0f} us/msg"
            )
        return r

    return interleaved_rounds(
        ctx,
        systems,
        modes,
        rounds_n,
        one,
        available=peers.available,
        reason=peers.reason,
        what=f"{producers}+{producers}, {client} client",
        messages=lambda mode: (native_messages(n, mode) if client == "native" else n) // producers * producers,
        row={"client": client},
    )


def _goals(
    ctx: Context, rows: list[dict[str, Any]], peer_names: list[str], counts: list[int], modes: list[str]
) -> None:
    """Per client, producer count and mode: ours over the faster peer (per round, median), and server CPU."""
    summary = []
    for client, producers, mode in itertools.product(CLIENTS, counts, modes):
        by = {
            r["system"]: r for r in rows if r["producers"] == producers and r["mode"] == mode and r["client"] == client
        }
        ours = by.get("jmsstore")
        if ours is None or ours.get("rate") is None:
            continue
        present = [by[p] for p in peer_names if by.get(p, {}).get("rate") is not None]
        if not present:
            continue
        quotients = []
        for i, o in enumerate(ours["rounds"]):
            peer_rates = [p["rounds"][i].get("rate") for p in present]
            best = max((x for x in peer_rates if x is not None), default=None)
            quotients.append(ratio(o.get("rate"), best))
        over = median(quotients)
        faster = max(present, key=lambda p: p["rate"])
        cpu_least = min(p["server_cpu_us_per_message"] for p in present)
        entry = {
            "client": client,
            "producers": producers,
            "mode": mode,
            "faster_peer": faster["system"],
            "over_faster_peer_rounds": quotients,
            "over_faster_peer": over,
            "server_cpu_us_per_message": ours["server_cpu_us_per_message"],
            "least_peer_server_cpu_us_per_message": cpu_least,
        }
        summary.append(entry)
        which = f"{mode}, {producers}+{producers}" + ("" if client == "stomp.py" else f", {client} client")
        ctx.goal("stomp", f"{which}: jmsstore / faster peer", "ratio", over, ">=", GOAL_RATIO)
        ctx.goal(
            "stomp",
            f"{which}: least peer server CPU / ours",
            "ratio",
            ratio(cpu_least, ours["server_cpu_us_per_message"]),
            ">=",
            1.0,
        )
    ctx.results["stomp"]["goals"] = summary


def _report(ctx: Context, rows: list[dict[str, Any]], peers: Peers, rounds_n: int) -> None:
    servers_table(ctx, peers)
    ctx.table(
        "Over STOMP: 1 KiB, a queue, P producers + P consumers (a connection each), client-individual ACKs",
        [
            "P",
            "client",
            "mode",
            "server",
            "msg/s",
            "range",
            "vs jmsstore",
            "server CPU us/msg",
            "range",
            "client CPU us/msg",
            "received",
            "left",
            "status",
        ],
        [
            [
                r["producers"],
                r["client"],
                r["mode"],
                r["system"],
                r.get("rate"),
                range_text(r.get("rate_min"), r.get("rate_max")),
                r.get("vs_jmsstore"),
                r.get("server_cpu_us_per_message"),
                range_text(r.get("server_cpu_us_per_message_min"), r.get("server_cpu_us_per_message_max"), 1),
                r.get("client_cpu_us_per_message"),
                r.get("received"),
                r.get("remaining"),
                cell(r["status"], REASON_WIDTH),
            ]
            for r in rows
        ],
        footer="\n".join(
            [
                "persistent: persistent:true, a receipt per SEND waited for; non-persistent: neither;",
                "client: stomp.py (Python threads) or native (jmsstore-stomp-load, the same frames);",
                "vs jmsstore: rate / ours in the same round (median of the per-round quotients);",
                "server CPU: the server process only (jmsstore serve / beam.smp / java), per message received;",
                f"{rounds_n} round(s), medians; ranges min-max over the rounds.",
                *(
                    [f"quick: CPU is counted in {1000 // servers.CLOCK_TICKS} ms ticks, coarse for so few messages."]
                    if ctx.quick
                    else []
                ),
            ]
        ),
    )
