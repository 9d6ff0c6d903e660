//! The text helpers the pages share, all `crate::text`'s: cutting a label
//! to a number of characters, the FNV-1a hash.

pub use crate::text::cut_chars as truncate;
pub use crate::text::fnv1a;
