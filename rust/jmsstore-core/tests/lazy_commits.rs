//! Lazy commits ask for no flush of their own: they go out with the next
//! group written for other work, after `LAZY_MAX_DELAY` at the latest, or
//! when the store closes; they are validated like any other batch.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{small, TestResult};
use jmsstore_core::store::LAZY_MAX_DELAY;
use jmsstore_core::{Error, Store};

#[test]
fn a_lazy_batch_alone_is_written_within_its_delay() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), small(1 << 20))?;
    let h = store.put("q", b"message")?;
    let mut batch = store.batch();
    batch.delete(h)?;
    let (done, result) = mpsc::channel();
    store.commit_lazy(batch, move |r| done.send(r.is_ok()).expect("send"))?;
    // Nothing else is written: only the delay sends it out (the bound is
    // generous, for loaded machines; what it checks is that it comes at all).
    assert!(result.recv_timeout(LAZY_MAX_DELAY * 500)?);
    drop(store);
    let store = Store::open(dir.path(), small(1 << 20))?;
    assert!(!store.contains(h));
    Ok(())
}

#[test]
fn a_lazy_batch_goes_out_with_the_next_durable_commit() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), small(1 << 20))?;
    let old = store.put("q", b"old")?;
    let mut batch = store.batch();
    batch.delete(old)?;
    let (done, result) = mpsc::channel();
    store.commit_lazy(batch, move |r| done.send(r.is_ok()).expect("send"))?;
    // Queued before it, so written in the same group or an earlier one:
    // its completion has run by the time the durable commit returns.
    let new = store.put("q", b"new")?;
    assert_eq!(result.try_recv(), Ok(true));
    drop(store);
    let store = Store::open(dir.path(), small(1 << 20))?;
    assert!(!store.contains(old));
    assert_eq!(store.read(new)?, b"new");
    Ok(())
}

/// What the lazy acknowledgements check their batched deletes with, before submitting them.
#[test]
fn retain_live_keeps_the_live_handles_in_order() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), small(1 << 20))?;
    let handles: Vec<u64> = (0..6u32).map(|i| store.put("q", &i.to_le_bytes())).collect::<Result<_, _>>()?;
    let mut batch = store.batch();
    batch.delete(handles[1])?;
    batch.delete(handles[4])?;
    store.commit(batch)?;
    let unknown = handles[5] + 1_000;
    let mut asked = vec![handles[5], handles[1], unknown, handles[0], handles[4], handles[3]];
    store.retain_live(&mut asked);
    assert_eq!(asked, vec![handles[5], handles[0], handles[3]]);
    let mut none = Vec::new();
    store.retain_live(&mut none);
    assert!(none.is_empty());
    Ok(())
}

#[test]
fn closing_writes_waiting_lazy_batches() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), small(1 << 20))?;
    let mut handles = Vec::new();
    for i in 0..100u32 {
        let mut batch = store.batch();
        handles.push(batch.put("q", &i.to_le_bytes())?);
        store.commit_lazy(batch, |_| {})?;
    }
    store.close()?;
    let store = Store::open(dir.path(), small(1 << 20))?;
    for (i, h) in (0..100u32).zip(&handles) {
        assert_eq!(store.read(*h)?, i.to_le_bytes());
    }
    Ok(())
}

#[test]
fn a_refused_lazy_batch_changes_nothing_and_calls_nothing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), small(1 << 20))?;
    let h = store.put("q", b"kept")?;
    let mut batch = store.batch();
    batch.delete(h)?;
    batch.delete(h + 1000)?;
    let (done, result) = mpsc::channel::<()>();
    let refused = store.commit_lazy(batch, move |_| done.send(()).expect("send"));
    assert!(matches!(refused, Err(Error::UnknownHandle(x)) if x == h + 1000), "{refused:?}");
    store.close()?;
    assert!(result.recv_timeout(Duration::from_millis(100)).is_err(), "a refused batch's callback ran");
    let store = Store::open(dir.path(), small(1 << 20))?;
    assert_eq!(store.read(h)?, b"kept");
    Ok(())
}
