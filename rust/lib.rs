//! youmu's core: a global page index over many Parquet files, positioned page reads
//! decoded to Arrow, and keyed permutations. Pure Rust; the Python bindings live in
//! `py/` behind the `python` feature and add nothing but conversions.

pub mod atomic;
pub mod batch;
pub mod cache;
pub mod checksum;
pub mod error;
pub mod fastdiv;
pub mod file;
pub mod index;
pub mod inspect;
pub mod int96;
pub mod io;
pub mod levels;
pub mod limits;
pub mod mixture;
pub mod pagecheck;
pub mod paths;
pub mod permute;
pub mod perprocess;
pub mod persist;
pub mod rcu;
pub mod read;
pub mod redact;
pub mod rules;
pub mod runtime;
pub mod scan;
pub mod storage;
pub mod thrift;
pub mod tokens;
pub mod validate;
pub mod varint;

pub use error::{Error, Result};
pub use index::{PageIndex, PageInfo};
pub use permute::Permutation;

#[cfg(feature = "python")]
mod py;
