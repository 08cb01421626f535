//! The live-object index: where each live object's newest record is.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// A hasher for maps keyed by handles and sequence numbers: one multiply.
/// Keys are mostly consecutive integers, which a multiplicative hash spreads
/// perfectly; SipHash's DoS resistance buys nothing for keys we assign.
#[derive(Clone, Copy, Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map keyed by handle (or any id we assign).
pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Where a record is: segment number, offset and total length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// Segment number.
    pub segment: u64,
    /// Offset inside the segment.
    pub offset: u64,
    /// Record length (header, name and stored body).
    pub len: u32,
}

/// An index entry: 16 bytes per live object plus the map's overhead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    segment: u32,
    offset: u32,
    len: u32,
    collection: u32,
}

impl Entry {
    fn location(&self) -> Location {
        Location { segment: u64::from(self.segment), offset: u64::from(self.offset), len: self.len }
    }
}

/// Live objects by handle, and the handles of each collection in order.
#[derive(Default)]
pub struct Index {
    entries: IdMap<Entry>,
    by_collection: Vec<BTreeSet<u64>>,
    collection_ids: HashMap<Arc<str>, u32>,
    collection_names: Vec<Arc<str>>,
    live_bytes: u64,
}

impl Index {
    /// Builds an index at once from `(handle, collection id, location)` and
    /// the collection names the ids refer to (faster than inserting one by one).
    pub fn build(objects: impl ExactSizeIterator<Item = (u64, u32, Location)>, names: Vec<Arc<str>>) -> Index {
        let mut entries = IdMap::with_capacity_and_hasher(objects.len(), BuildHasherDefault::default());
        let mut by_collection: Vec<Vec<u64>> = vec![Vec::new(); names.len()];
        let mut live_bytes = 0;
        for (handle, collection, loc) in objects {
            entries.insert(
                handle,
                Entry {
                    segment: u32::try_from(loc.segment).expect("segment numbers fit in 32 bits"),
                    offset: u32::try_from(loc.offset).expect("segments are under 4 GiB"),
                    len: loc.len,
                    collection,
                },
            );
            by_collection[collection as usize].push(handle);
            live_bytes += u64::from(loc.len);
        }
        let by_collection = by_collection.into_iter().map(BTreeSet::from_iter).collect();
        let collection_ids = names.iter().enumerate().map(|(i, n)| (n.clone(), i as u32)).collect();
        Index { entries, by_collection, collection_ids, collection_names: names, live_bytes }
    }

    /// Number of live objects.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if there are no live objects.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sum of the record lengths of the live objects.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// The id of a collection, created on first use.
    fn collection_id(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.collection_ids.get(name) {
            return id;
        }
        let id = self.collection_names.len() as u32;
        let name: Arc<str> = Arc::from(name);
        self.collection_names.push(name.clone());
        self.collection_ids.insert(name, id);
        self.by_collection.push(BTreeSet::new());
        id
    }

    /// Where `handle` is, and its collection.
    pub fn get(&self, handle: u64) -> Option<(Location, &Arc<str>)> {
        self.entries.get(&handle).map(|e| (e.location(), &self.collection_names[e.collection as usize]))
    }

    /// True if `handle` is live.
    pub fn contains(&self, handle: u64) -> bool {
        self.entries.contains_key(&handle)
    }

    /// Sets `handle`'s location; returns the location it replaces.
    pub fn insert(&mut self, handle: u64, collection: &str, loc: Location) -> Option<Location> {
        let collection = self.collection_id(collection);
        let entry = Entry {
            segment: u32::try_from(loc.segment).expect("segment numbers fit in 32 bits"),
            offset: u32::try_from(loc.offset).expect("segments are under 4 GiB"),
            len: loc.len,
            collection,
        };
        self.live_bytes += u64::from(loc.len);
        let old = self.entries.insert(handle, entry);
        if let Some(old) = old {
            self.live_bytes -= u64::from(old.len);
            if old.collection != collection {
                self.by_collection[old.collection as usize].remove(&handle);
            }
        }
        self.by_collection[collection as usize].insert(handle);
        old.map(|e| e.location())
    }

    /// Moves `handle` to `to` only if it is still at `from` (for compaction,
    /// racing with writers). Returns true if it moved.
    pub fn relocate(&mut self, handle: u64, from: Location, to: Location) -> bool {
        match self.entries.get_mut(&handle) {
            Some(e) if e.location() == from => {
                e.segment = u32::try_from(to.segment).expect("segment numbers fit in 32 bits");
                e.offset = u32::try_from(to.offset).expect("segments are under 4 GiB");
                self.live_bytes = self.live_bytes - u64::from(e.len) + u64::from(to.len);
                e.len = to.len;
                true
            }
            _ => false,
        }
    }

    /// Removes `handle`; returns where it was.
    pub fn remove(&mut self, handle: u64) -> Option<Location> {
        let old = self.entries.remove(&handle)?;
        self.live_bytes -= u64::from(old.len);
        self.by_collection[old.collection as usize].remove(&handle);
        Some(old.location())
    }

    /// Up to `limit` handles of `collection` greater than `after`, in handle order.
    pub fn handles(&self, collection: &str, after: Option<u64>, limit: usize) -> Vec<u64> {
        let Some(&id) = self.collection_ids.get(collection) else {
            return Vec::new();
        };
        let set = &self.by_collection[id as usize];
        match after {
            Some(after) => set.range(after.saturating_add(1)..).take(limit).copied().collect(),
            None => set.iter().take(limit).copied().collect(),
        }
    }

    /// Collections that hold at least one live object, with their object counts.
    pub fn collections(&self) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = self
            .collection_names
            .iter()
            .zip(&self.by_collection)
            .filter(|(_, set)| !set.is_empty())
            .map(|(name, set)| (name.to_string(), set.len()))
            .collect();
        out.sort();
        out
    }

    /// Number of live objects in `collection`.
    pub fn collection_len(&self, collection: &str) -> usize {
        self.collection_ids.get(collection).map_or(0, |&id| self.by_collection[id as usize].len())
    }

    /// Every live object's handle and location (for compaction's liveness check).
    pub fn locations(&self) -> impl Iterator<Item = (u64, Location)> + '_ {
        self.entries.iter().map(|(&h, e)| (h, e.location()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(segment: u64, offset: u64, len: u32) -> Location {
        Location { segment, offset, len }
    }

    #[test]
    fn insert_replace_remove_keeps_live_bytes() {
        let mut index = Index::default();
        assert_eq!(index.insert(1, "a", loc(1, 80, 100)), None);
        assert_eq!(index.insert(2, "a", loc(1, 180, 50)), None);
        assert_eq!(index.live_bytes(), 150);
        assert_eq!(index.insert(1, "a", loc(2, 80, 10)), Some(loc(1, 80, 100)));
        assert_eq!(index.live_bytes(), 60);
        assert_eq!(index.remove(2), Some(loc(1, 180, 50)));
        assert_eq!(index.live_bytes(), 10);
        assert_eq!(index.handles("a", None, 10), vec![1]);
    }

    #[test]
    fn handles_are_paged_in_order_per_collection() {
        let mut index = Index::default();
        for h in [5, 1, 9, 3] {
            index.insert(h, "q", loc(1, h * 100, 10));
        }
        index.insert(4, "other", loc(1, 1000, 10));
        assert_eq!(index.handles("q", None, 2), vec![1, 3]);
        assert_eq!(index.handles("q", Some(3), 10), vec![5, 9]);
        assert_eq!(index.handles("missing", None, 10), Vec::<u64>::new());
        assert_eq!(index.collections(), vec![("other".to_string(), 1), ("q".to_string(), 4)]);
    }

    #[test]
    fn relocate_only_moves_unchanged_entries() {
        let mut index = Index::default();
        index.insert(1, "a", loc(1, 80, 10));
        assert!(!index.relocate(1, loc(1, 81, 10), loc(3, 80, 10)));
        assert!(index.relocate(1, loc(1, 80, 10), loc(3, 80, 10)));
        assert_eq!(index.get(1).map(|(l, _)| l), Some(loc(3, 80, 10)));
    }
}
