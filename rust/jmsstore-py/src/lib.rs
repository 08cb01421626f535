//! `jmsstore._native`: the thin PyO3 layer over `jmsstore-core`. It converts
//! arguments and results and releases the GIL around every call that does
//! I/O, checksums or compression, or waits for a lock; policy lives in the
//! core (per message) and in Python (API, configuration, waits). Its files
//! mirror the core's modules (`broker/` mirrors `jmsstore_core::broker`).

#![deny(clippy::unwrap_used)]

use pyo3::prelude::*;

// The send path allocates on Python's threads and frees on the store's
// (record buffers, completions): glibc's arenas contend there, mimalloc's
// thread-local heaps do not. mimalloc 2 (the crate's `v2`), not 3: with 16
// asynchronous senders, 3 kept faulting in fresh transparent huge pages
// (the kernel zeroing 2 MiB each) for memory freed on other threads. 2 did
// too, less often, while it asked for huge pages (`madvise`): `no_thp`
// stops it asking, for its own memory only (the process's THP setting is
// the application's).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod broker;
mod codec;
mod completion;
mod errors;
mod inspect;
mod message;
mod pager;
mod progress;
mod stomp_ack;
mod stomp_dispatch;
mod stomp_head;
mod stomp_message;
mod stomp_outbox;
mod stomp_send;
mod store;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<store::NativeStore>()?;
    m.add_class::<store::NativeBatch>()?;
    m.add_class::<pager::NativePager>()?;
    m.add_class::<broker::wake::Signal>()?;
    m.add_class::<broker::wake::Doorbell>()?;
    m.add_class::<broker::ledger::Account>()?;
    m.add_class::<broker::target::NativeDestination>()?;
    m.add_class::<broker::target::NativeTarget>()?;
    m.add_class::<broker::target::NativeRoutes>()?;
    m.add_class::<broker::server::NativeBroker>()?;
    m.add_class::<broker::server::NativeStagedSend>()?;
    m.add_class::<broker::server::NativeAckBacklog>()?;
    m.add_class::<broker::recovery::HeaderIndex>()?;
    m.add_class::<inspect::Record>()?;
    m.add_class::<inspect::Damage>()?;
    m.add_class::<broker::selector::NativeSelector>()?;
    m.add_function(wrap_pyfunction!(inspect::segments, m)?)?;
    m.add_function(wrap_pyfunction!(inspect::read_segment, m)?)?;
    m.add_function(wrap_pyfunction!(inspect::live, m)?)?;
    m.add_function(wrap_pyfunction!(message::read_message, m)?)?;
    m.add_function(wrap_pyfunction!(stomp_head::scan_head, m)?)?;
    m.add_class::<stomp_head::WholeFrameScanner>()?;
    m.add_class::<stomp_send::NativeSendLane>()?;
    m.add_class::<stomp_outbox::NativeOutbox>()?;
    m.add_class::<stomp_ack::NativeInFlight>()?;
    m.add_class::<stomp_ack::NativeAckLane>()?;
    m.add_class::<stomp_dispatch::NativeDispatcher>()?;
    m.add_class::<broker::fetch::NativeReader>()?;
    m.add_function(wrap_pyfunction!(stomp_send::map_stomp_send, m)?)?;
    m.add_function(wrap_pyfunction!(stomp_message::encode_message_frames, m)?)?;
    m.add_function(wrap_pyfunction!(stomp_head::encode_plain, m)?)?;
    m.add_function(wrap_pyfunction!(message::write_message, m)?)?;
    m.add_function(wrap_pyfunction!(pager::check_order, m)?)?;
    m.add_function(wrap_pyfunction!(codec::compress, m)?)?;
    m.add_function(wrap_pyfunction!(codec::decompress, m)?)?;
    m.add_function(wrap_pyfunction!(codec::codecs, m)?)?;
    m.add_function(wrap_pyfunction!(codec::raw_write_limit, m)?)?;
    m.add("STOMP_NOT_PROPERTIES", jmsstore_core::stomp_send::NOT_PROPERTIES.to_vec())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
