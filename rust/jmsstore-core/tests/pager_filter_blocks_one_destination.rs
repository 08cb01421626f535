//! A consumer's filter (a selector: a Python callback through the binding)
//! runs under its own destination's lock and no other. While a filter on
//! one destination is blocked, another destination keeps working: adds,
//! page-outs (the blocked destination, which holds the most resident
//! bytes, is passed over), reads back, takes, removes, filters of its own,
//! and the pager-wide calls that take no destination lock.

use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use jmsstore_core::codec::Codec;
use jmsstore_core::pager::order::Order;
use jmsstore_core::pager::{BodyLocation, Header, Key, NewMessage, Pager, PagerOptions};

/// Long enough for the work to finish on a loaded machine; short enough
/// that a pager which stalls fails the test rather than hanging it.
const PATIENCE: Duration = Duration::from_secs(30);

fn pager(budget: u64, dir: &Path) -> Arc<Pager> {
    let options = PagerOptions {
        message_buffer_size: budget,
        paging_directory: dir.to_path_buf(),
        paging_codec: Codec::None,
        read_ahead: 4,
    };
    Arc::new(Pager::new(None, options).expect("pager"))
}

fn new(id: u64) -> NewMessage<'static> {
    NewMessage { id, ..NewMessage::default() }
}

#[test]
fn a_blocked_filter_on_one_destination_stalls_no_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Room for eight bodies: `b`'s forty page out.
    let p = pager(8000, dir.path());
    let a = p.create_destination("a", Order::Fifo).expect("dest");
    let b = p.create_destination("b", Order::Fifo).expect("dest");
    // `a` holds the most resident bytes: the first place a page-out looks.
    let a_keys: Vec<Key> = (0..6).map(|i| p.add(a, &new(i), Some(&[1; 1000]), 0).expect("add")).collect();

    let (inside_tx, inside_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let holder = {
        let p = p.clone();
        thread::spawn(move || {
            let mut first = Some((inside_tx, go_rx));
            let mut blocking = |_: &Header, _: Option<&[u8]>| {
                if let Some((inside, go)) = first.take() {
                    inside.send(()).expect("inside");
                    // Blocked until the test says so (or gives up).
                    let _ = go.recv();
                }
                true
            };
            p.take(a, 0, Some(&mut blocking), false).expect("take")
        })
    };
    inside_rx.recv_timeout(PATIENCE).expect("the filter on a runs");

    let (done_tx, done_rx) = mpsc::channel();
    let worker = {
        let p = p.clone();
        thread::spawn(move || {
            let before = p.stats();
            let keys: Vec<Key> =
                (0..40u8).map(|i| p.add(b, &new(u64::from(i)), Some(&[i; 1000]), 0).expect("add")).collect();
            let paged = p.stats();
            assert!(paged.page_outs >= before.page_outs + 32, "b paged out its own bodies: {paged:?}");
            assert_eq!(p.residency(a).expect("residency"), (6, 6, 6000), "a, busy, was passed over");
            assert_eq!(p.header(keys[39]).expect("header").location, BodyLocation::Paged);
            assert_eq!(p.count(a).expect("count"), 6);
            // A filter of b's own, reading bodies back from the paging file.
            let mut seen = 0;
            let mut odd = |h: &Header, body: Option<&[u8]>| {
                seen += 1;
                body.is_some_and(|body| body[0] == h.id as u8) && h.id % 2 == 1
            };
            assert_eq!(p.next(b, 0, false, Some(&mut odd), true).expect("next"), Some(keys[1]));
            assert_eq!(seen, 2);
            // Takes (page-ins, read-ahead) and removes, in order.
            for (i, key) in keys.iter().enumerate() {
                let (k, body) = p.take(b, 0, None, false).expect("take").expect("a message");
                assert_eq!((k, Vec::from(body)), (*key, vec![i as u8; 1000]));
                p.remove(k).expect("remove");
            }
            let s = p.stats();
            assert!(s.page_ins > 0, "{s:?}");
            assert_eq!((s.messages, s.paged_messages, s.destinations), (6, 0, 2), "{s:?}");
            let _ = done_tx.send(());
        })
    };
    let finished = done_rx.recv_timeout(PATIENCE);
    // Let a's filter go in any case, so that the test ends.
    let _ = go_tx.send(());
    let taken = holder.join().expect("holder");
    worker.join().expect("b's work failed");
    finished.expect("b's work finished while a's filter was blocked");
    let (k, body) = taken.expect("the filter took a's first message");
    assert_eq!((k, Vec::from(body)), (a_keys[0], vec![1; 1000]));
    let s = p.stats();
    assert!(s.resident_bytes <= 8000, "{s:?}");
}
