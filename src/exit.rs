//! One exit policy for every command (after uv's `ExitStatus`): the process exit code of the JSON
//! contract, decided in one place.
//!
//! - 0 `Fits`: the workload fits / no out-of-memory was found.
//! - 1 `OutOfMemory`: an out-of-memory was predicted or found — also when its cause is `unknown`
//!   (the evidence shows an OOM but does not decide what filled the card).
//! - 2 `BadInput`: bad input or usage; nothing was measured.
//! - 3 `Failure`: llm-oom or its probe failed (a crash, a hang) without finding an out-of-memory.
//! - `Program(code)`: `watch` passes the watched program's own exit code through.

use crate::verdict::{Cause, Verdict};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Fits,
    OutOfMemory,
    BadInput,
    Failure,
    Program(u8),
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Fits => 0,
            ExitStatus::OutOfMemory => 1,
            ExitStatus::BadInput => 2,
            ExitStatus::Failure => 3,
            ExitStatus::Program(code) => code,
        }
    }

    /// What a verdict means for the exit code: `none` is 0, every other cause an OOM.
    pub fn of(verdict: &Verdict) -> ExitStatus {
        match verdict.cause {
            Cause::None => ExitStatus::Fits,
            _ => ExitStatus::OutOfMemory,
        }
    }
}

impl From<&crate::Error> for ExitStatus {
    fn from(e: &crate::Error) -> ExitStatus {
        match e {
            crate::Error::Input(_) => ExitStatus::BadInput,
            crate::Error::OutOfMemory(_) => ExitStatus::OutOfMemory,
            crate::Error::Internal(_) | crate::Error::EngineUnavailable(_) => ExitStatus::Failure,
        }
    }
}
