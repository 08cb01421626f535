//! `jmsstore-stomp-load`: P producers and C consumers, each on its own
//! STOMP 1.2 connection, moving N messages through one queue of any STOMP
//! server, for `jmsstore-bench stomp --client native`.
//!
//! stomp.py costs its process 40-240 µs of CPU per message, and its
//! threads share one core, so it cannot drive a fast server at its pace;
//! this client costs a few µs and runs on native threads. It sends the
//! frames the stomp.py client of the suite sends:
//!
//! - producers: `SEND` with `persistent:true` and a `receipt`, waited for
//!   before the next (`--mode persistent`), or neither (`non-persistent`);
//!   each ends with a `DISCONNECT` whose receipt it waits for;
//! - consumers: `SUBSCRIBE` with `ack:client-individual` and a prefetch
//!   (`activemq.prefetchSize`, RabbitMQ's `prefetch-count`), an `ACK` per
//!   `MESSAGE`, every body compared with the one sent.
//!
//! On stdout, a line each: `ready` once every connection is up and every
//! consumer subscribed (then it waits for `go` on stdin), `finished` when
//! the last message arrives (the caller reads the server's CPU time at
//! both), and one JSON object with the counts, the seconds from `go` to
//! the last message, and this process's CPU ticks over the same span
//! (`/proc/self/stat`).
//!
//! ```text
//! jmsstore-stomp-load --port 61613 --destination /queue/bench --producers 4 \
//!     --consumers 4 --messages 20000 --mode persistent --body-file body.bin
//! ```

mod frame;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use frame::{encode, take, Frame};

/// How long a read waits before the thread looks at the run's state again.
const POLL: Duration = Duration::from_millis(200);

#[derive(Clone)]
struct Options {
    host: String,
    port: u16,
    destination: String,
    producers: usize,
    consumers: usize,
    messages: u64,
    persistent: bool,
    prefetch: u32,
    body: Arc<Vec<u8>>,
    login: String,
    passcode: String,
    vhost: String,
    timeout: Duration,
}

const USAGE: &str = "usage: jmsstore-stomp-load --port PORT [--host 127.0.0.1] --destination /queue/NAME \
--producers P --consumers C --messages N --mode persistent|non-persistent [--prefetch 128] \
[--body-file PATH | --body-size 1024] [--login guest] [--passcode guest] [--vhost /] [--timeout 60]";

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        host: "127.0.0.1".into(),
        port: 0,
        destination: String::new(),
        producers: 1,
        consumers: 1,
        messages: 1000,
        persistent: true,
        prefetch: 128,
        body: Arc::new(vec![b'x'; 1024]),
        login: "guest".into(),
        passcode: "guest".into(),
        vhost: "/".into(),
        timeout: Duration::from_secs(60),
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|_| format!("{flag}: not a whole number: {v:?}"));
        match flag.as_str() {
            "--host" => o.host = value.clone(),
            "--port" => o.port = u16::try_from(number(value)?).map_err(|_| format!("--port {value}"))?,
            "--destination" => o.destination = value.clone(),
            "--producers" => o.producers = number(value)? as usize,
            "--consumers" => o.consumers = number(value)? as usize,
            "--messages" => o.messages = number(value)?,
            "--prefetch" => o.prefetch = u32::try_from(number(value)?).map_err(|_| format!("--prefetch {value}"))?,
            "--body-size" => o.body = Arc::new(vec![b'x'; number(value)? as usize]),
            "--body-file" => o.body = Arc::new(std::fs::read(value).map_err(|e| format!("--body-file {value}: {e}"))?),
            "--login" => o.login = value.clone(),
            "--passcode" => o.passcode = value.clone(),
            "--vhost" => o.vhost = value.clone(),
            "--timeout" => o.timeout = Duration::from_secs(number(value)?),
            "--mode" => {
                o.persistent = match value.as_str() {
                    "persistent" => true,
                    "non-persistent" => false,
                    other => return Err(format!("--mode {other:?}: persistent or non-persistent")),
                }
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    if o.port == 0 || o.destination.is_empty() {
        return Err("--port and --destination are required".into());
    }
    if o.producers == 0 || o.consumers == 0 || o.body.is_empty() {
        return Err("--producers, --consumers and the body size must be at least 1".into());
    }
    Ok(o)
}

/// One STOMP connection: frames written whole, read with a short timeout.
struct Connection {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Connection {
    fn open(o: &Options) -> Result<Connection, String> {
        let stream = TcpStream::connect((o.host.as_str(), o.port)).map_err(|e| format!("connect: {e}"))?;
        // Each frame goes in one write; without Nagle an ACK is not held
        // back waiting for the server's acknowledgement of the last one.
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(POLL)).map_err(|e| e.to_string())?;
        let mut c = Connection { stream, buf: Vec::with_capacity(64 * 1024) };
        c.write(&encode(
            "CONNECT",
            &[
                ("accept-version", "1.2"),
                ("host", &o.vhost),
                ("login", &o.login),
                ("passcode", &o.passcode),
                ("heart-beat", "0,0"),
            ],
            b"",
        ))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        match c.expect(deadline)?.command.as_str() {
            "CONNECTED" => Ok(c),
            other => Err(format!("CONNECT answered with {other}")),
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream.write_all(bytes).map_err(|e| format!("write: {e}"))
    }

    /// The next frame, None if none came within the read timeout; an ERROR
    /// frame is an error.
    fn next(&mut self) -> Result<Option<Frame>, String> {
        loop {
            if let Some(frame) = take(&mut self.buf).map_err(|e| format!("malformed frame: {}", e.0))? {
                if frame.command == "ERROR" {
                    let body = String::from_utf8_lossy(&frame.body).into_owned();
                    return Err(format!("ERROR {}: {}", frame.header("message").unwrap_or(""), body.trim()));
                }
                return Ok(Some(frame));
            }
            let mut chunk = [0u8; 64 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("the server closed the connection".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }

    /// The next frame, waiting until `deadline`.
    fn expect(&mut self, deadline: Instant) -> Result<Frame, String> {
        loop {
            if let Some(frame) = self.next()? {
                return Ok(frame);
            }
            if Instant::now() >= deadline {
                return Err("no answer from the server in time".into());
            }
        }
    }

    /// Waits for the RECEIPT of `id` (a MESSAGE before it is an error here:
    /// producers subscribe to nothing).
    fn receipt(&mut self, id: &str, deadline: Instant) -> Result<(), String> {
        let frame = self.expect(deadline)?;
        match (frame.command.as_str(), frame.header("receipt-id")) {
            ("RECEIPT", Some(r)) if r == id => Ok(()),
            (command, r) => Err(format!("waited for RECEIPT {id}, got {command} {r:?}")),
        }
    }

    fn disconnect(&mut self, deadline: Instant) -> Result<(), String> {
        self.write(&encode("DISCONNECT", &[("receipt", "bye")], b""))?;
        self.receipt("bye", deadline)
    }
}

/// What all threads share.
struct Run {
    options: Options,
    received: AtomicU64,
    wrong_bodies: AtomicU64,
    sent: AtomicU64,
    stop: AtomicBool,
    /// When the last message arrived, and this process's CPU ticks then.
    finished: Mutex<Option<(Instant, u64)>>,
    errors: Mutex<Vec<String>>,
}

impl Run {
    /// The last message arrived (or the run ended without it): notes the
    /// time and CPU, and says `finished` on stdout at once, for the
    /// caller to read the server's CPU time.
    fn finish(&self) {
        let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        if finished.is_none() {
            *finished = Some((Instant::now(), cpu_ticks()));
            say("finished");
        }
    }

    fn fail(&self, who: &str, error: String) {
        self.errors.lock().unwrap_or_else(|p| p.into_inner()).push(format!("{who}: {error}"));
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// This process's user + system CPU time in clock ticks (Linux).
fn cpu_ticks() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0;
    };
    let Some(after_name) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0;
    };
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}

fn producer(run: &Run, mut c: Connection, count: u64, index: usize, start: &Barrier, deadline: Instant) {
    start.wait();
    let o = &run.options;
    for i in 0..count {
        if run.stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
            return;
        }
        let outcome = if o.persistent {
            let receipt = format!("p{index}-{i}");
            let frame = encode(
                "SEND",
                &[("destination", &o.destination), ("persistent", "true"), ("receipt", &receipt)],
                &o.body,
            );
            c.write(&frame).and_then(|()| c.receipt(&receipt, deadline))
        } else {
            c.write(&encode("SEND", &[("destination", &o.destination)], &o.body))
        };
        if let Err(e) = outcome {
            return run.fail(&format!("producer {index}"), e);
        }
        run.sent.fetch_add(1, Ordering::Relaxed);
    }
    // The receipt of the DISCONNECT: everything sent has arrived.
    if let Err(e) = c.disconnect(deadline) {
        run.fail(&format!("producer {index}"), e);
    }
}

fn consumer(run: &Run, mut c: Connection, index: usize, start: &Barrier, deadline: Instant) {
    start.wait();
    let o = &run.options;
    let total = o.messages;
    while !run.stop.load(Ordering::Relaxed) && run.received.load(Ordering::Relaxed) < total {
        if Instant::now() >= deadline {
            return;
        }
        let frame = match c.next() {
            Ok(Some(frame)) => frame,
            Ok(None) => continue,
            Err(e) => return run.fail(&format!("consumer {index}"), e),
        };
        if frame.command != "MESSAGE" {
            continue;
        }
        let Some(ack) = frame.header("ack") else {
            return run.fail(&format!("consumer {index}"), "a MESSAGE without an ack header".into());
        };
        if let Err(e) = c.write(&encode("ACK", &[("id", ack)], b"")) {
            return run.fail(&format!("consumer {index}"), e);
        }
        if frame.body != *o.body {
            run.wrong_bodies.fetch_add(1, Ordering::Relaxed);
        }
        if run.received.fetch_add(1, Ordering::SeqCst) + 1 == total {
            run.finish();
        }
    }
    let _ = c.write(&encode("UNSUBSCRIBE", &[("id", "1")], b""));
    if let Err(e) = c.disconnect(Instant::now() + Duration::from_secs(10)) {
        run.fail(&format!("consumer {index}"), e);
    }
}

fn subscribe(o: &Options) -> Result<Connection, String> {
    let mut c = Connection::open(o)?;
    let prefetch = o.prefetch.to_string();
    c.write(&encode(
        "SUBSCRIBE",
        &[
            ("destination", &o.destination),
            ("id", "1"),
            ("ack", "client-individual"),
            ("activemq.prefetchSize", &prefetch),
            ("prefetch-count", &prefetch),
            ("receipt", "subscribed"),
        ],
        b"",
    ))?;
    c.receipt("subscribed", Instant::now() + Duration::from_secs(30))?;
    Ok(c)
}

/// One line on stdout, flushed (the caller reads them as they come).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("jmsstore-stomp-load: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    let setup_started = Instant::now();
    // Consumers first, each subscribed (its receipt back) before any send.
    let mut consumers = Vec::new();
    let mut producers = Vec::new();
    let connected = (0..options.consumers)
        .map(|_| subscribe(&options).map(|c| consumers.push(c)))
        .chain((0..options.producers).map(|_| Connection::open(&options).map(|c| producers.push(c))))
        .collect::<Result<Vec<()>, String>>();
    if let Err(e) = connected {
        eprintln!("jmsstore-stomp-load: setting up: {e}");
        std::process::exit(1);
    }
    let setup_s = setup_started.elapsed().as_secs_f64();
    // Connected: the caller notes the server's CPU time, then says go.
    say("ready");
    let mut go = String::new();
    if std::io::stdin().read_line(&mut go).is_err() || go.trim() != "go" {
        eprintln!("jmsstore-stomp-load: expected \"go\" on stdin, got {go:?}");
        std::process::exit(2);
    }
    let run = Arc::new(Run {
        received: AtomicU64::new(0),
        wrong_bodies: AtomicU64::new(0),
        sent: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        finished: Mutex::new(None),
        errors: Mutex::new(Vec::new()),
        options,
    });
    let o = &run.options;
    let start = Arc::new(Barrier::new(o.producers + o.consumers + 1));
    let base = o.messages / o.producers as u64;
    let extra = o.messages % o.producers as u64;
    let deadline = Instant::now() + o.timeout;
    let mut threads = Vec::new();
    for (index, c) in producers.into_iter().enumerate() {
        let (run, start) = (run.clone(), start.clone());
        let count = base + u64::from((index as u64) < extra);
        threads.push(std::thread::spawn(move || producer(&run, c, count, index, &start, deadline)));
    }
    for (index, c) in consumers.into_iter().enumerate() {
        let (run, start) = (run.clone(), start.clone());
        threads.push(std::thread::spawn(move || consumer(&run, c, index, &start, deadline)));
    }
    start.wait();
    let (started, cpu_at_start) = (Instant::now(), cpu_ticks());
    for t in threads {
        if t.join().is_err() {
            run.fail("a thread", "panicked".into());
        }
    }
    run.finish();
    let (ended, cpu_at_end) =
        run.finished.lock().unwrap_or_else(|p| p.into_inner()).unwrap_or_else(|| (Instant::now(), cpu_ticks()));
    let received = run.received.load(Ordering::SeqCst);
    let errors = run.errors.lock().unwrap_or_else(|p| p.into_inner());
    say(&format!(
        "{{\"sent\": {}, \"received\": {}, \"planned\": {}, \"elapsed_s\": {:.6}, \"setup_s\": {:.6}, \
         \"cpu_ticks\": {}, \"wrong_bodies\": {}, \"timed_out\": {}, \"errors\": [{}]}}",
        run.sent.load(Ordering::SeqCst),
        received,
        o.messages,
        ended.duration_since(started).as_secs_f64(),
        setup_s,
        cpu_at_end.saturating_sub(cpu_at_start),
        run.wrong_bodies.load(Ordering::SeqCst),
        received < o.messages && errors.is_empty(),
        errors.iter().map(|e| json_string(e)).collect::<Vec<_>>().join(", ")
    ));
    std::process::exit(if errors.is_empty() && received >= o.messages { 0 } else { 1 });
}
