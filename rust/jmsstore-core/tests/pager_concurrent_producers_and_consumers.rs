//! Many threads on one pager, with a budget so small that bodies are paged
//! out and read back all the time: producers add to several destinations
//! (persistent and non-persistent messages), consumers take, filter,
//! release and remove, an observer reads statistics, counts, browses and
//! expired lists meanwhile. At the end every message was taken exactly
//! once, each FIFO destination delivered every producer's messages in the
//! order they were sent, and every counter is back to zero.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use jmsstore_core::codec::Codec;
use jmsstore_core::pager::order::Order;
use jmsstore_core::pager::{Filter, Header, NewMessage, Pager, PagerOptions};
use jmsstore_core::{Store, StoreOptions, SyncPolicy};

const PRODUCERS: u64 = 4;
const PER_PRODUCER: u64 = 20_000;
/// About a dozen average bodies.
const BUDGET: u64 = 16 << 10;
const MAX_BODY: u64 = 2000;
const PATIENCE: Duration = Duration::from_secs(300);

/// The destinations: name, order, consumers (one where order is checked).
const DESTINATIONS: [(&str, &str, usize); 4] =
    [("fifo", "fifo", 1), ("fifo-filtered", "fifo", 1), ("priority", "priority", 2), ("lifo", "lifo", 1)];

fn id_of(producer: u64, seq: u64) -> u64 {
    (producer << 32) | seq
}

fn destination_of(id: u64) -> usize {
    ((id >> 32) + (id & 0xffff_ffff)) as usize % DESTINATIONS.len()
}

fn body_of(id: u64) -> Vec<u8> {
    let len = 100 + (id.wrapping_mul(7919) % (MAX_BODY - 100)) as usize;
    let mut body = vec![id as u8; len];
    body[..8].copy_from_slice(&id.to_le_bytes());
    body
}

fn id_in(body: &[u8]) -> u64 {
    u64::from_le_bytes(body[..8].try_into().expect("8 bytes"))
}

fn open(dir: &Path) -> (Arc<Store>, Arc<Pager>) {
    let options = StoreOptions { sync_policy: SyncPolicy::Disabled, preallocate: false, ..StoreOptions::default() };
    let store = Arc::new(Store::open(dir.join("store"), options).expect("store"));
    let options = PagerOptions {
        message_buffer_size: BUDGET,
        paging_directory: dir.join("paging"),
        paging_codec: Codec::None,
        read_ahead: 8,
    };
    let pager = Arc::new(Pager::new(Some(store.clone()), options).expect("pager"));
    (store, pager)
}

#[test]
fn producers_and_consumers_over_several_destinations_under_constant_paging_lose_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, p) = open(dir.path());
    let ids: Vec<u32> = DESTINATIONS
        .iter()
        .map(|(name, order, _)| p.create_destination(name, Order::parse(order).expect("order")).expect("dest"))
        .collect();
    let mut expected = [0u64; DESTINATIONS.len()];
    for producer in 0..PRODUCERS {
        for seq in 0..PER_PRODUCER {
            expected[destination_of(id_of(producer, seq))] += 1;
        }
    }
    let taken_so_far: Arc<Vec<AtomicU64>> = Arc::new(DESTINATIONS.iter().map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();

    for producer in 0..PRODUCERS {
        let (p, store, ids) = (p.clone(), store.clone(), ids.clone());
        threads.push(thread::spawn(move || {
            for seq in 0..PER_PRODUCER {
                let id = id_of(producer, seq);
                let body = body_of(id);
                let store_handle = (seq % 3 == 0).then(|| store.put("q", &body).expect("put"));
                let m = NewMessage { id, priority: (seq % 10) as u8, store_handle, ..NewMessage::default() };
                p.add(ids[destination_of(id)], &m, Some(&body), 0).expect("add");
            }
            Vec::new()
        }));
    }

    for (d, (_, order, consumers)) in DESTINATIONS.iter().enumerate() {
        for _ in 0..*consumers {
            let (p, ids, taken_so_far) = (p.clone(), ids.clone(), taken_so_far.clone());
            let (order, filtered, want) = (*order, d == 1, expected[d]);
            threads.push(thread::spawn(move || {
                let mut got = Vec::new();
                while taken_so_far[d].load(Ordering::SeqCst) < want {
                    // A filter that reads every body, wherever it is.
                    let mut matches_its_body = |h: &Header, body: Option<&[u8]>| body.is_some_and(|b| id_in(b) == h.id);
                    let filter: Option<Filter<'_>> = if filtered { Some(&mut matches_its_body) } else { None };
                    let batch = p.take_many(ids[d], 0, 8, filter, filtered).expect("take_many");
                    if batch.is_empty() {
                        thread::yield_now();
                        continue;
                    }
                    for t in batch {
                        let id = id_in(&t.body);
                        assert_eq!(Vec::from(t.body), body_of(id), "a body came back intact");
                        // Some priority messages go back once before they are kept.
                        if order == "priority" && id % 7 == 0 && t.redelivery_count == 0 {
                            p.release(t.key, true, None).expect("release");
                            continue;
                        }
                        got.push(id);
                        p.remove(t.key).expect("remove");
                        taken_so_far[d].fetch_add(1, Ordering::SeqCst);
                    }
                }
                got.into_iter().map(|id| (d, id)).collect::<Vec<_>>()
            }));
        }
    }

    let max_resident = Arc::new(AtomicU64::new(0));
    let observer = {
        let (p, ids, done, max_resident) = (p.clone(), ids.clone(), done.clone(), max_resident.clone());
        thread::spawn(move || {
            let mut rounds = 0u64;
            while !done.load(Ordering::SeqCst) {
                let s = p.stats();
                max_resident.fetch_max(s.resident_bytes, Ordering::SeqCst);
                assert!(p.expired(i64::MAX - 1, 100).expect("expired").is_empty(), "nothing expires");
                for id in &ids {
                    let (messages, resident, _) = p.residency(*id).expect("residency");
                    assert!(resident <= messages + 64);
                    let _ = p.count(*id).expect("count");
                    let _ = p.browse(*id, None, 4).expect("browse");
                }
                rounds += 1;
                thread::sleep(Duration::from_millis(1));
            }
            rounds
        })
    };

    // Join everything, giving up (and failing) if it takes far too long: a
    // lock-order deadlock would hang here.
    let (joined_tx, joined_rx) = mpsc::channel();
    thread::spawn(move || {
        let got: Vec<(usize, u64)> = threads.into_iter().flat_map(|t| t.join().expect("a thread failed")).collect();
        let _ = joined_tx.send(got);
    });
    let got = joined_rx.recv_timeout(PATIENCE).expect("every producer and consumer finished");
    done.store(true, Ordering::SeqCst);
    let rounds = observer.join().expect("observer");

    // Every message exactly once, in its own destination.
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (d, id) in &got {
        assert_eq!(*d, destination_of(*id), "message {id:#x} came out of the wrong destination");
        *seen.entry(*id).or_default() += 1;
    }
    assert_eq!(seen.len() as u64, PRODUCERS * PER_PRODUCER, "every message was taken");
    assert!(seen.values().all(|n| *n == 1), "no message was taken twice");
    // FIFO destinations: each producer's messages in the order sent.
    for (d, (_, order, _)) in DESTINATIONS.iter().enumerate() {
        if *order != "fifo" {
            continue;
        }
        let mut last: HashMap<u64, u64> = HashMap::new();
        for (_, id) in got.iter().filter(|(dd, _)| *dd == d) {
            let (producer, seq) = (id >> 32, id & 0xffff_ffff);
            if let Some(before) = last.insert(producer, seq) {
                assert!(before < seq, "{}: producer {producer} sent {before} before {seq}", DESTINATIONS[d].0);
            }
        }
    }

    let s = p.stats();
    eprintln!(
        "{} messages, {} page-outs, {} page-ins, {} read-ahead hits, {} filter body reads, most resident {} bytes \
         (budget {BUDGET}), {rounds} observer rounds",
        PRODUCERS * PER_PRODUCER,
        s.page_outs,
        s.page_ins,
        s.read_ahead_hits,
        s.filter_body_reads,
        max_resident.load(Ordering::SeqCst)
    );
    assert!(s.page_outs > 0 && s.page_ins > 0 && s.filter_body_reads > 0, "it paged: {s:?}");
    assert_eq!(
        (s.messages, s.resident_messages, s.resident_bytes, s.paged_messages, s.paged_bytes, s.store_paged_messages),
        (0, 0, 0, 0, 0, 0),
        "every counter is back to zero: {s:?}"
    );
    assert_eq!(s.paging_file_bytes, 0, "the paging files were emptied");
    for id in &ids {
        assert_eq!(p.residency(*id).expect("residency"), (0, 0, 0));
    }
    // Over the budget only by what adds in flight hold (see the pager's "Transients").
    assert!(max_resident.load(Ordering::SeqCst) <= BUDGET + 2 * PRODUCERS * MAX_BODY);
}
