//! Order as a pure function of a seed: keyed permutations of any size (`permute.rs`,
//! dividing by a fixed divisor by multiplication, `fastdiv.rs`) and the mixture maps
//! built on them (`mixture/`).

pub mod fastdiv;
pub mod mixture;
pub mod permute;
