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

/// What a completion callback sees of `completing_while_idle` for each of
/// `commits` asynchronous commits made one after the other (each waited for).
fn idle_as_seen(store: &Store, commits: usize, lazy_alongside: bool) -> Result<Vec<bool>, Box<dyn std::error::Error>> {
    let mut seen = Vec::new();
    for i in 0..commits {
        if lazy_alongside {
            let mut lazy = store.batch();
            lazy.put("acks", format!("lazy {i}").as_bytes())?;
            store.commit_lazy(lazy, |_| {})?;
        }
        let mut batch = store.batch();
        batch.put("q", format!("message {i}").as_bytes())?;
        let (done, result) = mpsc::channel();
        store.commit_async(batch, move |r| {
            done.send((r.is_ok(), jmsstore_core::store::completing_while_idle())).expect("send")
        })?;
        let (ok, idle) = result.recv_timeout(Duration::from_secs(30))?;
        assert!(ok);
        seen.push(idle);
    }
    Ok(seen)
}

#[test]
fn a_lone_writers_completions_are_told_the_flusher_is_idle_from_its_second_on() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), small(1 << 20))?;
    assert_eq!(idle_as_seen(&store, 4, false)?, [false, true, true, true]);
    // Lazy batches in the same groups do not count as other writers.
    assert_eq!(idle_as_seen(&store, 3, true)?, [true, true, true]);
    // Nor is any other thread told so.
    assert!(!jmsstore_core::store::completing_while_idle());
    Ok(())
}

#[test]
fn completions_of_a_group_with_two_writers_are_not_told_the_flusher_is_idle() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), small(1 << 20))?;
    let (done, result) = mpsc::channel();
    for round in 0..20 {
        // Two writers' batches, submitted together, mostly land in one group.
        for writer in 0..2 {
            let mut batch = store.batch();
            batch.put("q", format!("{round}/{writer}").as_bytes())?;
            let done = done.clone();
            store.commit_async(batch, move |_| {
                done.send(jmsstore_core::store::completing_while_idle()).expect("send")
            })?;
        }
    }
    let seen: Vec<bool> = (0..40).map(|_| result.recv_timeout(Duration::from_secs(30))).collect::<Result<_, _>>()?;
    assert!(seen.iter().filter(|&&idle| !idle).count() >= 20, "{seen:?}");
    Ok(())
}
