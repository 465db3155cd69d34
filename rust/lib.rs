//! youmu's core: a global page index over many Parquet files, positioned page reads
//! decoded to Arrow, and keyed permutations. Pure Rust; the Python bindings live in
//! `py/` behind the `python` feature and add nothing but conversions.

pub mod error;
pub mod index;
pub mod limits;
pub mod order;
pub mod parquet;
pub mod rcu;
pub mod redact;
pub mod rules;
pub mod runtime;
pub mod storage;

pub use error::{Error, Result};
pub use index::{PageIndex, PageInfo};
pub use order::permute::Permutation;

#[cfg(feature = "python")]
mod py;
