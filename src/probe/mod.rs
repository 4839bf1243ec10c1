//! The staged probe: a child process (the same binary, `llm-oom __probe`) loads the model on the
//! device and runs the parent's tasks; the parent ([`session`]) survives whatever the child does
//! (out of memory, panic, abort, hang) and checks that the child left nothing on the GPU.

pub mod child;
pub mod protocol;
pub mod session;

pub use protocol::{GenerateTask, Hello, OomFacts, Outcome, Setup, Task, TaskResult};
pub use session::{Reply, Session};
