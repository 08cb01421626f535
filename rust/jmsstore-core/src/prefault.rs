//! Memory a bulk load is about to fill, faulted in on another core.
//!
//! Loading a backlog of a million messages as a server opens writes about
//! a hundred megabytes of fresh memory (the destination's slots and its
//! delivery-order keys). Left to the loading thread, every 4 KiB page of
//! it stops the load for a page fault and the kernel's zeroing of the
//! page: about a third of the load's time. A second thread asking the
//! kernel to fault the pages in (`MADV_POPULATE_WRITE`, Linux 5.14) keeps
//! ahead of the load on a core that would otherwise wait; what it holds is
//! unchanged (the pages are fresh, or already in and left as they are).
//! A thread with no core to spare (a recovery worker) asks for its own
//! memory in a few calls rather than a fault per page, which costs less.

/// Regions smaller than this are left to the load (a thread costs more).
const WORTH_IT: usize = 4 << 20;

/// The spare capacity of `v` (what it will hold without reallocating) as
/// an (address, length) region.
pub(crate) fn spare<T>(v: &Vec<T>) -> (usize, usize) {
    let start = v.as_ptr_range().end as usize;
    (start, (v.capacity() - v.len()) * std::mem::size_of::<T>())
}

/// Runs `work` while another thread faults in `regions` (address, length).
/// A region freed or reused meanwhile is harmless: faulting pages in
/// changes no byte, and an unmapped range is an error the thread ignores.
pub(crate) fn while_prefaulting<R>(regions: &[(usize, usize)], work: impl FnOnce() -> R) -> R {
    let regions: Vec<(usize, usize)> = regions.iter().copied().filter(|&(_, len)| len >= WORTH_IT).collect();
    if regions.is_empty() || !cfg!(target_os = "linux") {
        return work();
    }
    std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new().name("jmsstore-prefault".into()).spawn_scoped(scope, move || {
            for (start, len) in regions {
                populate(start, len);
            }
        });
        // Without the thread the load faults its pages in itself, as always.
        drop(spawned);
        work()
    })
}

/// Faults `region` (address, length) in now, in a few system calls rather
/// than a page fault per page: for a thread about to fill it that has no
/// core to spare.
pub(crate) fn fault_in((start, len): (usize, usize)) {
    if len >= 1 << 20 {
        populate(start, len);
    }
}

/// Whether the kernel faulted the whole pages of the region in (false: an
/// older kernel, or a range not mapped).
#[cfg(target_os = "linux")]
fn populate(start: usize, len: usize) -> bool {
    const PAGE: usize = 4096;
    // The whole pages of the region, in steps, so the load can overtake the
    // thread at a step's end rather than wait for all of it.
    const STEP: usize = 2 << 20;
    let (mut at, end) = (start.next_multiple_of(PAGE), (start + len) / PAGE * PAGE);
    while at < end {
        let n = STEP.min(end - at);
        // SAFETY: MADV_POPULATE_WRITE changes no byte of the range; a range
        // that is not mapped (freed meanwhile) fails with ENOMEM, ignored.
        if unsafe { libc::madvise(at as *mut libc::c_void, n, libc::MADV_POPULATE_WRITE) } != 0 {
            return false; // an older kernel (EINVAL), or unmapped: the load faults the pages in itself
        }
        at += n;
    }
    true
}

#[cfg(not(target_os = "linux"))]
fn populate(_start: usize, _len: usize) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::{fault_in, populate, spare, while_prefaulting};

    /// Minor page faults this thread has taken.
    #[cfg(target_os = "linux")]
    fn minor_faults() -> libc::c_long {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage fills the struct it is given.
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) }, 0);
        // SAFETY: filled by the call above.
        unsafe { usage.assume_init() }.ru_minflt
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn memory_faulted_in_beforehand_is_written_without_page_faults() {
        let n = 64 << 20;
        let mut v: Vec<u8> = Vec::with_capacity(n);
        let (start, len) = spare(&v);
        if !populate(start, len) {
            eprintln!("MADV_POPULATE_WRITE is not available (Linux 5.14): nothing to check");
            return;
        }
        let before = minor_faults();
        v.resize(n, 1);
        let faults = minor_faults() - before;
        // Without it, each of its 16,384 pages would fault (or 32 huge pages where THP is always on).
        assert!(faults < 16, "{faults} page faults writing 64 MiB faulted in beforehand");
        assert!(v.iter().all(|b| *b == 1));
    }

    #[test]
    fn faulting_memory_in_changes_none_of_it() {
        // Half written before, half while the other thread faults the rest in.
        let n = 2 << 20; // 16 MiB of u64
        let mut v: Vec<u64> = Vec::with_capacity(n);
        v.extend(0..(n / 2) as u64);
        let region = (v.as_ptr() as usize, v.capacity() * 8);
        while_prefaulting(&[spare(&v), region], || v.extend((n / 2) as u64..n as u64));
        assert!(v.iter().enumerate().all(|(i, x)| *x == i as u64));
        // And again, all of it already in.
        fault_in((v.as_ptr() as usize, v.len() * 8));
        assert!(v.iter().enumerate().all(|(i, x)| *x == i as u64));
        assert_eq!(spare(&v).1, (v.capacity() - v.len()) * 8);
    }

    #[test]
    fn a_region_freed_before_it_is_faulted_in_is_passed_over() {
        let v: Vec<u8> = Vec::with_capacity(8 << 20);
        let region = spare(&v);
        drop(v);
        fault_in(region); // unmapped now, or another allocation's: neither changes
        assert_eq!(while_prefaulting(&[region], || 7), 7);
    }
}
