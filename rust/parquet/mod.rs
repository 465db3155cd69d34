//! One Parquet file, below the index: its model (`file.rs`: the parsed footer, the
//! projection of the columns asked for, the page table), the header-scan fallback for
//! files without an OffsetIndex (`scan.rs`), and decoding its pages: Thrift page headers
//! (`thrift.rs` over `varint.rs`), repetition levels (`levels.rs`), INT96 timestamps
//! (`int96.rs`), a data page's structure checked before arrow-rs decodes it
//! (`pagecheck.rs`), the reader arrow-rs decodes through (`io.rs`), the token-id fast path
//! (`tokens.rs`) and a cheap check of the decoded arrays (`validate.rs`).

pub mod decompress;
pub mod file;
pub mod int96;
pub mod io;
pub mod levels;
pub mod pagebuf;
pub mod pagecheck;
pub mod scan;
pub mod thrift;
pub mod tokens;
pub mod validate;
pub mod varint;
