//! tenure: leader election on etcd that you can see.
//!
//! - [`election`]: the core (campaign, leadership, resign, leader, observe,
//!   the shared fence); it knows etcd and nothing else.
//! - [`cli`]: the `tenure` command line, the only place `anyhow` is used.

pub mod cli;
pub mod election;
