use jmsstore_core::{Error, Store, StoreOptions};

#[test]
fn put_read_update_delete_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions { max_segment_bytes: 1 << 20, ..StoreOptions::default() };
    let (a, b);
    {
        let store = Store::open(dir.path(), opts.clone()).unwrap();
        a = store.put("orders", b"first").unwrap();
        b = store.put("orders", b"second").unwrap();
        store.update(a, b"first v2").unwrap();
        let mut tx = store.batch();
        let c = tx.put("orders", b"third").unwrap();
        tx.delete(b).unwrap();
        store.commit(tx).unwrap();
        assert_eq!(store.read(a).unwrap(), b"first v2");
        assert_eq!(store.read(c).unwrap(), b"third");
        assert!(matches!(store.read(b), Err(Error::UnknownHandle(_))));
        let s = store.stats();
        assert_eq!(s.live_objects, 2);
        store.close().unwrap();
        assert!(matches!(store.put("orders", b"x"), Err(Error::Closed)));
    }
    let store = Store::open(dir.path(), opts).unwrap();
    assert_eq!(store.read(a).unwrap(), b"first v2");
    assert!(!store.contains(b));
    assert_eq!(store.scan("orders", None, 10).unwrap().len(), 2);
    let r = store.recovery_report();
    assert_eq!(r.live_objects, 2);
    assert!(r.torn_tail.is_none());
}
