//! The staged probe: a child process loads the model on the device and runs the parent's tasks —
//! the same binary's candle runtime (`llm-oom __probe`), or the user's own transformers in a Python
//! child that speaks the same protocol ([`launcher`]). The parent ([`session`]) survives whatever
//! the child does (out of memory, panic, abort, hang) and checks that it left nothing on the GPU.

pub mod child;
pub mod launcher;
pub mod protocol;
pub mod session;
pub mod world;

pub use protocol::{GenerateTask, Hello, OomFacts, Outcome, Setup, Task, TaskResult};
pub use session::{Reply, Session};
