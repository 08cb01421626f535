"""Running a real broker (RabbitMQ, ActiveMQ) beside the benchmark, and
measuring it: the parts the two peers share.

A :class:`Server` starts its broker's processes in their own session
(``start_new_session``), bound to 127.0.0.1 on ports picked free at start,
with every data, log and configuration file under one scratch directory;
it never touches a system service. :meth:`Server.stop` ends every process
of those sessions (SIGTERM, then SIGKILL after a grace period) and reports
whether anything still listens on the broker's ports. A small watchdog
(``sh``, its own session) kills the broker's process groups should the
benchmark process itself die without stopping them (``kill -9``).

:class:`Client` is the per-run side the harness drives
(:func:`bench.broker.drive`): per-thread producers and consumers, each with
its own connection, plus the broker's CPU time over the run, read from
``/proc/<pid>/stat`` of every process in the broker's sessions.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from jmsstore.bench.peers import age_ns, stamped

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
START_TIMEOUT = 120.0  # seconds a broker may take to accept connections
STOP_GRACE = 20.0  # seconds between SIGTERM and SIGKILL

Send = Callable[[], None]
Receive = Callable[[float], int]
Close = Callable[[], None]


# --------------------------------------------------------------------------
# ports and processes
# --------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(ports: list[int]) -> list[int]:
    """Those of ``ports`` that a socket of this machine listens on, any address
    (from ``/proc/net/tcp`` and ``tcp6``)."""
    wanted = set(ports)
    found: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                port = int(fields[1].rsplit(":", 1)[1], 16)
                if port in wanted:
                    found.add(port)
    return sorted(found)


def listen_addresses(ports: list[int]) -> list[str]:
    """``address:port`` of every listening socket on ``ports`` (IPv4 and IPv6,
    hex as the kernel writes it decoded), to show that a broker listens on
    loopback only."""
    out: list[str] = []
    wanted = set(ports)
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) <= 3 or fields[3] != "0A":
                continue
            addr, port_hex = fields[1].rsplit(":", 1)
            port = int(port_hex, 16)
            if port not in wanted:
                continue
            raw = bytes.fromhex(addr)
            # the kernel prints each 32-bit word in host (little-endian) order
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            family = socket.AF_INET6 if v6 else socket.AF_INET
            out.append(f"{socket.inet_ntop(family, words)}:{port}")
    return sorted(set(out))


def loopback_only(addresses: list[str]) -> bool:
    """Every address one of 127.0.0.0/8, ::1 or ::ffff:127.x (no wildcard, no interface)."""
    for a in addresses:
        host = a.rsplit(":", 1)[0]
        if not (host.startswith("127.") or host == "::1" or host.startswith("::ffff:127.")):
            return False
    return True


def _stat(pid: str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from "state" on


def session_pids(sessions: list[int]) -> list[int]:
    """Every live process whose session is one of ``sessions``."""
    wanted = {str(s) for s in sessions}
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            f = _stat(entry)
            if f is not None and f[3] in wanted and f[0] != "Z":
                out.append(int(entry))
    return out


def sessions_cpu_seconds(sessions: list[int]) -> float:
    """User + system CPU time of every process in ``sessions``, with their
    reaped children's (``/proc/<pid>/stat`` utime, stime, cutime, cstime)."""
    wanted = {str(s) for s in sessions}
    ticks = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            f = _stat(entry)
            if f is not None and f[3] in wanted:
                ticks += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    return ticks / CLOCK_TICKS


def wait_for_port(port: int, deadline: float, alive: Callable[[], bool]) -> bool:
    """Until ``deadline`` (a ``monotonic`` time): True once a TCP connect to
    127.0.0.1:``port`` succeeds, False if ``alive()`` turns false first or
    time runs out."""
    while time.monotonic() < deadline:
        if not alive():
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
        time.sleep(0.2)
    return False


def tail(path: Path, lines: int = 8) -> str:
    """The last lines of a log file ('' if there is none), for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())


class Server:
    """One broker, started from scratch directories under ``root``.

    Subclasses give :meth:`processes` (the commands to start, in order) and
    :meth:`ready` (a client-level check that the broker takes work).
    ``ports`` are picked at construction and kept across restarts, so the
    same data directory can be opened again (:meth:`crash` + :meth:`start`).
    """

    name = "broker"
    packages: tuple[str, ...] = ()

    def __init__(self, root: Path, log: Callable[[str], None] = lambda _: None) -> None:
        # absolute: the broker runs with its root as working directory and is given paths under it
        self.root = root.absolute()
        self.log = log
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._watchdog: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}
        self.started_s: float | None = None
        self.starts = 0

    # ---- for subclasses --------------------------------------------------
    def processes(self) -> list[tuple[str, list[str], dict[str, str], int]]:
        """(what, argv, environment, port to wait for) per process, started in order."""
        raise NotImplementedError

    def ready(self) -> None:
        """Raise unless the broker takes work (after its ports are open)."""

    def version(self) -> str | None:
        return None

    def settings(self) -> dict[str, Any]:
        return {}

    def log_file(self) -> Path:
        return self.root / "log" / "console.log"

    # ---- lifecycle -------------------------------------------------------
    def sessions(self) -> list[int]:
        return [p.pid for _, p in self.procs]

    def start(self, timeout: float = START_TIMEOUT) -> float:
        """Start every process (those already running are kept) and wait until
        the broker takes work; the seconds it took. Raises RuntimeError with
        the log's tail if it does not come up within ``timeout``."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        (self.root / "log").mkdir(parents=True, exist_ok=True)
        running = {what for what, p in self.procs if p.poll() is None}
        for what, argv, env, port in self.processes():
            if what in running:
                continue
            out = open(self.root / "log" / f"{what}.out", "ab")  # noqa: SIM115 - handed to the child
            try:
                proc = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=self.root,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            finally:
                out.close()
            self.procs.append((what, proc))
            self._guard()
            if not wait_for_port(port, deadline, lambda p=proc: p.poll() is None):  # type: ignore[misc]
                code = proc.poll()
                why = f"exited with status {code}" if code is not None else f"no listener on {port} in {timeout:.0f} s"
                raise RuntimeError(f"{self.name} {what} {why}: {tail(self.root / 'log' / f'{what}.out')}")
        while True:
            try:
                self.ready()
                break
            except Exception as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.name} did not take work in {timeout:.0f} s: {e}") from e
                dead = [what for what, p in self.procs if p.poll() is not None]
                if dead:
                    raise RuntimeError(f"{self.name} {dead[0]} exited: {tail(self.log_file())}") from e
                time.sleep(0.5)
        self.starts += 1
        self.started_s = time.monotonic() - t0
        return self.started_s

    def _guard(self) -> None:
        """(Re)start the watchdog that SIGKILLs the broker's process groups
        once this process is gone."""
        if self._watchdog is not None:
            self._stop_watchdog()
        groups = " ".join(f"-{pid}" for pid in self.sessions())
        script = f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; kill -9 {groups} 2>/dev/null"
        self._watchdog = subprocess.Popen(
            ["sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            _signal_group(self._watchdog.pid, signal.SIGKILL)  # its sleep too
            self._watchdog.wait()
            self._watchdog = None

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of every process of the broker so far."""
        return sessions_cpu_seconds(self.sessions())

    def crash(self, keep: tuple[str, ...] = ()) -> None:
        """SIGKILL every process (except those named in ``keep``): a crash.
        Start it again with :meth:`start` on the same data."""
        kept = []
        for what, proc in self.procs:
            if what in keep and proc.poll() is None:
                kept.append((what, proc))
                continue
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
            _wait_gone([proc.pid], 10)
        self.procs = kept

    def stop(self, grace: float = STOP_GRACE) -> dict[str, Any]:
        """Stop every process, newest first: SIGTERM to its process group, and
        SIGKILL for what is left after ``grace`` seconds. Returns what
        happened: ``stopped`` (no process of its sessions left), ``killed``
        (SIGKILL was needed) and ``listening_after`` (ports still open)."""
        killed = []
        for what, proc in reversed(self.procs):
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(grace)
                clean = _wait_gone([proc.pid], 5)  # the rest of its process group
            except subprocess.TimeoutExpired:
                clean = False
            if not clean:
                killed.append(what)
                _signal_group(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
                _wait_gone([proc.pid], 10)
        left = session_pids(self.sessions())
        self.procs = []
        self._stop_watchdog()
        ports = list(self.ports.values())
        still = listening(ports)
        deadline = time.monotonic() + 10
        while still and time.monotonic() < deadline:  # a socket can outlive its process briefly
            time.sleep(0.2)
            still = listening(ports)
        return {"stopped": not left, "left": left, "killed": killed, "listening_after": still}


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_gone(sessions: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while session_pids(sessions):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@contextlib.contextmanager
def running(server: Server) -> Iterator[Server]:
    """Start ``server`` and stop it on the way out, whatever happens."""
    try:
        server.start()
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------
# the client side of one run
# --------------------------------------------------------------------------


class Client:
    """What a peer's per-run client shares: the bookkeeping
    :func:`bench.broker.drive` and the brokers suite read.

    Before a run, :meth:`expect` says how many threads will connect and how
    many messages to expect; :meth:`start` (drive calls it before releasing
    the threads) waits until every thread has connected and notes the
    broker's CPU time; the receive that completes the expected count notes
    it again, so :meth:`broker_cpu_s` covers the run, not the connecting.
    """

    def __init__(self, server: Server, mode: str, body: bytes) -> None:
        self.server = server
        self.mode = mode
        self.body = body
        self.wrong_bodies = 0
        self.send_errors = 0
        self.latencies: Any = None  # an array/list: bodies carry their send time
        self._cv = threading.Condition()
        self._parties = 0
        self._connected = 0
        self._failed: BaseException | None = None
        self._planned = 0
        self._received = 0
        self._cpu0: float | None = None
        self._cpu1: float | None = None

    def expect(self, parties: int, planned: int) -> None:
        self._parties, self._planned = parties, planned

    def _joined(self) -> None:
        with self._cv:
            self._connected += 1
            self._cv.notify_all()

    def _setup_failed(self, e: BaseException) -> None:
        with self._cv:
            self._failed = e
            self._cv.notify_all()

    def start(self) -> None:
        with self._cv:
            self._cv.wait_for(lambda: self._connected >= self._parties or self._failed is not None, 60)
        self._cpu0 = self.server.cpu_seconds()

    def _got(self, n: int) -> None:
        with self._cv:
            self._received += n
            last = self._received >= self._planned > 0 and self._cpu1 is None
        if last:
            self._cpu1 = self.server.cpu_seconds()

    def broker_cpu_s(self) -> float | None:
        """The broker's CPU time from :meth:`start` to the last expected
        receive (or to now, if that never came)."""
        if self._cpu0 is None:
            return None
        end = self._cpu1 if self._cpu1 is not None else self.server.cpu_seconds()
        return end - self._cpu0

    def producer(self) -> tuple[Send, Close]:
        """A producer on its own connection: (send one message, finish)."""
        raise NotImplementedError

    def consumer(self) -> tuple[Receive, Close]:
        """A consumer on its own connection: (receive within a timeout -> count, close)."""
        raise NotImplementedError

    def remaining(self) -> int:
        """Messages left on the queue after the run."""
        raise NotImplementedError

    def close(self, delete: bool = True) -> None:
        """Release the run's control connection (and delete its queue where the protocol can)."""

    def payload(self) -> bytes:
        """The body to send: stamped with the send time when latencies are taken."""
        return stamped(self.body) if self.latencies is not None else self.body

    def check(self, body: bytes) -> None:
        """Count a received body: its size, and its age when latencies are taken."""
        if len(body) != len(self.body):
            self.wrong_bodies += 1
        elif self.latencies is not None:
            self.latencies.append(age_ns(body))
        self._got(1)
