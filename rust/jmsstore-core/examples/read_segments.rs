//! Reads of objects spread over many segments, in handle order and in a
//! shuffled order, from 1 and 4 threads; prints reads per second.
//! `cargo run --release --example read_segments -- DIR SEGMENTS [MAX_OPEN_FILES]`
//! (the store is made once in DIR and reused by later runs).
use std::sync::Arc;
use std::time::Instant;

use jmsstore_core::{Store, StoreOptions, SyncPolicy};
use rand::seq::SliceRandom;
use rand::SeedableRng;

const SEGMENT: u64 = 256 << 10;
const BODY: usize = 512;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let segments: u64 = args[2].parse().expect("segments");
    let mut options = StoreOptions {
        max_segment_bytes: SEGMENT,
        preallocate: false,
        compaction_threshold: 0.0,
        sync_policy: SyncPolicy::Disabled,
        ..StoreOptions::default()
    };
    // Only a build with the descriptor pool has the option; set it by name there.
    if let Some(limit) = args.get(3) {
        set_max_open_files(&mut options, limit.parse().expect("max open files"));
    }
    let fresh = !dir.exists();
    let store = Arc::new(Store::open(&dir, options).expect("open"));
    if fresh {
        let per_segment = SEGMENT as usize / (BODY + 60);
        let body = vec![7u8; BODY];
        for _ in 0..segments as usize * per_segment {
            store.put("q", &body).expect("put");
        }
        store.flush().expect("flush");
    }
    let handles = store.handles("q", None, usize::MAX).expect("handles");
    let mut shuffled = handles.clone();
    shuffled.shuffle(&mut rand::rngs::StdRng::seed_from_u64(7));
    println!("{} objects in {} segments", handles.len(), store.stats().segments);
    for (name, order) in [("in order", &handles), ("shuffled", &shuffled)] {
        for threads in [1usize, 4] {
            let best = (0..3)
                .map(|_| {
                    let started = Instant::now();
                    std::thread::scope(|s| {
                        for t in 0..threads {
                            let store = &store;
                            s.spawn(move || {
                                for h in order.iter().skip(t).step_by(threads) {
                                    std::hint::black_box(store.read(*h).expect("read"));
                                }
                            });
                        }
                    });
                    order.len() as f64 / started.elapsed().as_secs_f64()
                })
                .fold(0.0, f64::max);
            println!("{name:>9}, {threads} thread(s): {best:>10.0} reads/s");
        }
    }
}

fn set_max_open_files(options: &mut StoreOptions, limit: usize) {
    options.max_open_files = limit;
}
