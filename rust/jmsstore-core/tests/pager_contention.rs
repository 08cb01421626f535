//! A contention microbenchmark, not a test (ignored by default): threads
//! each working on their own destination of one pager, messages cycled per
//! second (add, take, remove). It measures what the per-destination locks
//! buy, against the same file built from an older pager:
//!
//! ```text
//! cargo test --release -p jmsstore-core --test pager_contention -- --ignored --nocapture --test-threads 1
//! ```
//!
//! Scenarios, each for 1, 2 and 4 threads:
//! - `memory`: bodies stay resident (a large budget): the locks' cost alone;
//! - `paging`: a budget of 64 KiB with a standing backlog of 256 bodies per
//!   destination, so that every add pages out and every take reads back;
//! - `filter`: as `memory`, while one more thread takes from its own
//!   destination with a slow filter (20 µs per candidate, 50 candidates it
//!   rejects): only the other threads' cycles are counted.
//!
//! `PAGER_CONTENTION=memory,paging` runs only those scenarios. Only what the
//! public API offers is used, so the file builds against the older pager too.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use jmsstore_core::codec::Codec;
use jmsstore_core::pager::order::Order;
use jmsstore_core::pager::{Header, NewMessage, Pager, PagerOptions};

const RUN: Duration = Duration::from_millis(1500);
const BODY: [u8; 1024] = [7; 1024];

fn pager(budget: u64, dir: &Path) -> Arc<Pager> {
    let options = PagerOptions {
        message_buffer_size: budget,
        paging_directory: dir.to_path_buf(),
        paging_codec: Codec::None,
        read_ahead: 16,
    };
    Arc::new(Pager::new(None, options).expect("pager"))
}

/// Cycles per second over all `threads` (each on its own destination,
/// each with `backlog` messages standing), with `slow_filter` adding one
/// more thread that filters slowly on a destination of its own; and the
/// process's CPU time per cycle, ns (the slow filter's spinning included).
fn run(threads: usize, budget: u64, backlog: usize, slow_filter: bool) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = pager(budget, dir.path());
    let dests: Vec<u32> =
        (0..threads).map(|i| p.create_destination(&format!("d{i}"), Order::Fifo).expect("dest")).collect();
    for d in &dests {
        for i in 0..backlog {
            p.add(*d, &NewMessage { id: i as u64, ..NewMessage::default() }, Some(&BODY), 0).expect("add");
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let cycles = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    if slow_filter {
        let slow = p.create_destination("slow", Order::Fifo).expect("dest");
        for i in 0..50 {
            p.add(slow, &NewMessage { id: i, ..NewMessage::default() }, Some(b"s"), 0).expect("add");
        }
        let (p, stop) = (p.clone(), stop.clone());
        handles.push(thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut reject = |_: &Header, _: Option<&[u8]>| {
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(20) {
                        std::hint::spin_loop();
                    }
                    false
                };
                assert!(p.take(slow, 0, Some(&mut reject), false).expect("take").is_none());
            }
        }));
    }
    let start = Arc::new(Barrier::new(threads + 1));
    for d in dests {
        let (p, stop, cycles, start) = (p.clone(), stop.clone(), cycles.clone(), start.clone());
        handles.push(thread::spawn(move || {
            start.wait();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                p.add(d, &NewMessage { id: n, ..NewMessage::default() }, Some(&BODY), 0).expect("add");
                let (key, _) = p.take(d, 0, None, false).expect("take").expect("a message");
                p.remove(key).expect("remove");
                n += 1;
            }
            cycles.fetch_add(n, Ordering::Relaxed);
        }));
    }
    start.wait();
    let (t, cpu) = (Instant::now(), cpu_ns());
    thread::sleep(RUN);
    stop.store(true, Ordering::Relaxed);
    let (elapsed, cpu) = (t.elapsed(), cpu_ns() - cpu);
    for h in handles {
        h.join().expect("thread");
    }
    let n = cycles.load(Ordering::Relaxed) as f64;
    (n / elapsed.as_secs_f64(), cpu / n)
}

/// The process's CPU time, ns (less sensitive to other load than the wall clock).
fn cpu_ns() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// Single-threaded costs, ns of CPU: a cycle (add, take, remove) with the
/// body in memory; an add past the budget (each pages a body out); a take
/// and remove of a paged backlog (page-ins, read-ahead).
fn single_thread_costs(n: u64) -> (f64, f64, f64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = pager(1 << 30, dir.path());
    let d = p.create_destination("d", Order::Fifo).expect("dest");
    let start = cpu_ns();
    for i in 0..n {
        p.add(d, &NewMessage { id: i, ..NewMessage::default() }, Some(&BODY), 0).expect("add");
        let (key, _) = p.take(d, 0, None, false).expect("take").expect("a message");
        p.remove(key).expect("remove");
    }
    let cycle = (cpu_ns() - start) / n as f64;
    let p = pager(1 << 20, &dir.path().join("paged"));
    let d = p.create_destination("d", Order::Fifo).expect("dest");
    let start = cpu_ns();
    for i in 0..n {
        p.add(d, &NewMessage { id: i, ..NewMessage::default() }, Some(&BODY), 0).expect("add");
    }
    let paged_add = (cpu_ns() - start) / n as f64;
    let start = cpu_ns();
    while let Some((key, _)) = p.take(d, 0, None, false).expect("take") {
        p.remove(key).expect("remove");
    }
    let paged_drain = (cpu_ns() - start) / n as f64;
    (cycle, paged_add, paged_drain)
}

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
fn pager_single_thread_cost() {
    let runs: Vec<(f64, f64, f64)> = (0..7).map(|_| single_thread_costs(100_000)).collect();
    let median = |f: fn(&(f64, f64, f64)) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "single-thread, ns of CPU (median of 7): cycle in memory {:.0}, paged add {:.0}, paged take+remove {:.0}",
        median(|r| r.0),
        median(|r| r.1),
        median(|r| r.2)
    );
}

#[test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
fn pager_contention() {
    let only = std::env::var("PAGER_CONTENTION").unwrap_or_default();
    println!("scenario  threads  cycles/s  cpu ns/cycle");
    for (scenario, budget, backlog, slow) in
        [("memory", 1u64 << 30, 0, false), ("paging", 64 << 10, 256, false), ("filter", 1 << 30, 0, true)]
    {
        if !only.is_empty() && !only.split(',').any(|s| s == scenario) {
            continue;
        }
        for threads in [1, 2, 4] {
            let (rate, cpu) = run(threads, budget, backlog, slow);
            println!("{scenario:<8}  {threads:>7}  {rate:>10.0}  {cpu:>8.0}");
        }
    }
}
