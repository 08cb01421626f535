//! Durable 1 KiB puts from N native threads against the raw disk limit.
//! `cargo run --release --example put_load -- DIR THREADS PUTS_PER_THREAD [direct-write|cache-flush]`
use std::sync::Arc;
use std::time::Instant;

use jmsstore_core::{Store, StoreOptions, SyncPolicy};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let threads: usize = args[2].parse().expect("threads");
    let per: usize = args[3].parse().expect("puts per thread");
    let policy = SyncPolicy::parse(args.get(4).map_or("direct-write", String::as_str)).expect("policy");
    let _ = std::fs::remove_dir_all(&dir);
    let store =
        Arc::new(Store::open(&dir, StoreOptions { sync_policy: policy, ..StoreOptions::default() }).expect("open"));
    let body = vec![7u8; 1024];
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let store = store.clone();
            let body = body.clone();
            std::thread::spawn(move || {
                for _ in 0..per {
                    store.put("q", &body).expect("put");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("join");
    }
    let secs = started.elapsed().as_secs_f64();
    let s = store.stats();
    let batch = s.records_written as f64 / s.writes as f64;
    let raw =
        jmsstore_core::calibrate::raw_write_limit(&dir.join("raw.bin"), (batch.round() as usize).max(1) * 1100, 2000)
            .expect("raw")
            .as_secs_f64();
    let raw_rate = 2000.0 * batch.round().max(1.0) / raw;
    let rate = (threads * per) as f64 / secs;
    println!(
        "{threads} threads {policy:?}: {rate:.0} puts/s, avg batch {batch:.1}, syncs/record {:.3}; raw at that batch {raw_rate:.0}/s; ratio {:.2}",
        s.syncs as f64 / s.records_written as f64,
        rate / raw_rate
    );
}
