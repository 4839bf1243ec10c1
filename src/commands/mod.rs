//! The commands wing: each command is a function from a typed request to a report value. No
//! command imports another; what two of them need lives in the layers beneath (`verdict`,
//! `budget`, `probe`, `model` …).

pub mod diagnose;
pub mod env;
pub mod explain;
pub mod plan;
pub mod run;
pub mod snapshot;
pub mod watch;
