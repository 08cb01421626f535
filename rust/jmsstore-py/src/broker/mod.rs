//! Bindings of the core's `broker` module, one file per core file.

pub mod selector;
