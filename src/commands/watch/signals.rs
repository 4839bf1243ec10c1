//! Signals sent to watch, passed to the program, and what happens when the program does not stop:
//! SIGTERM and SIGHUP go to the program, and its whole tree gets SIGKILL `TERM_GRACE` later if it
//! is still there; a first Ctrl-C (which the terminal already delivered to the program) is only
//! noted, a second one kills the tree `INT_GRACE` later. Each grace is printed before it starts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use super::guard::kill_tree;
use crate::error::{Error, Result};

/// How long the program has after SIGTERM (or SIGHUP) before its tree is killed.
pub const TERM_GRACE: Duration = Duration::from_secs(5);
/// How long after a second Ctrl-C.
pub const INT_GRACE: Duration = Duration::from_secs(2);

/// The forwarding thread and what it shares with watch.
pub struct Forwarder {
    handle: signal_hook::iterator::Handle,
    thread: JoinHandle<()>,
    /// Set when watch killed the tree itself (the program ignored its signals).
    pub escalated: Arc<AtomicBool>,
}

/// The handlers, installed before the program starts: a signal that comes while it is being
/// spawned waits for the forwarding thread instead of killing watch by default (which would
/// leave a program the guardian had not yet been told of).
pub struct Armed(signal_hook::iterator::Signals);

impl Armed {
    pub fn new() -> Result<Armed> {
        signal_hook::iterator::Signals::new([SIGTERM, SIGHUP, SIGINT])
            .map(Armed)
            .map_err(|e| Error::Internal(format!("cannot install signal handlers: {e}")))
    }
}

impl Forwarder {
    pub fn start(armed: Armed, root: u32, guard: Option<u32>, done: Arc<AtomicBool>) -> Forwarder {
        let Armed(mut signals) = armed;
        let handle = signals.handle();
        let escalated = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&escalated);
        let thread = std::thread::spawn(move || {
            let mut interrupts = 0;
            let mut timer: Option<JoinHandle<()>> = None;
            for sig in signals.forever() {
                let grace = if sig == SIGINT {
                    interrupts += 1;
                    if interrupts == 1 {
                        say("llm-oom: interrupted; press Ctrl-C again to kill the program");
                        continue;
                    }
                    INT_GRACE
                } else {
                    // SAFETY: kill(2) with the pid of the child we spawned and a valid signal.
                    unsafe {
                        libc::kill(root as libc::pid_t, sig);
                    }
                    TERM_GRACE
                };
                if timer.is_none() {
                    let (done, flag) = (Arc::clone(&done), Arc::clone(&flag));
                    timer = Some(std::thread::spawn(move || {
                        escalate(root, guard, grace, &done, &flag)
                    }));
                }
            }
            if let Some(t) = timer {
                let _ = t.join();
            }
        });
        Forwarder {
            handle,
            thread,
            escalated,
        }
    }

    pub fn stop(self) {
        self.handle.close();
        let _ = self.thread.join();
    }
}

/// After `grace`, SIGKILL the tree unless the program ended meanwhile.
fn escalate(root: u32, guard: Option<u32>, grace: Duration, done: &AtomicBool, flag: &AtomicBool) {
    say(&format!(
        "llm-oom: the program's process tree gets SIGKILL in {} s unless it exits",
        grace.as_secs()
    ));
    let until = Instant::now() + grace;
    while Instant::now() < until {
        if done.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if done.load(Ordering::Relaxed) {
        return;
    }
    flag.store(true, Ordering::Relaxed);
    let n = kill_tree(root, guard);
    say(&format!(
        "llm-oom: sent SIGKILL to {n} processes of the program's tree"
    ));
}

/// A line on stderr that never panics (a closed stderr must not stop the escalation).
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}
