//! The `watch` hook (src/snapshot/sitecustomize.py) in a real Python interpreter: a user's own
//! sitecustomize still runs, a program that never imports torch does not get it, and a CPU torch
//! program runs unchanged with the status saying CUDA was never initialised (LLM_OOM_TEST_PYTHON
//! names a Python with torch; without it that part says so and is skipped).

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Output};

use llm_oom::snapshot::hook::{install, is_python_command, Hook, SnapshotMode};

fn run(python: &OsString, hook: &Hook, pythonpath: Option<&Path>, code: &str) -> Output {
    let mut cmd = Command::new(python);
    cmd.args(["-c", code]).env_remove("PYTHONPATH");
    for (k, v) in hook.env(pythonpath.map(|p| p.as_os_str().to_owned())) {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn a_users_sitecustomize_still_runs_and_torch_is_not_imported() {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("user");
    std::fs::create_dir_all(&user).unwrap();
    let marker = dir.path().join("user-ran");
    std::fs::write(
        user.join("sitecustomize.py"),
        format!(
            "open({:?}, 'w').write(__name__)\n",
            marker.display().to_string()
        ),
    )
    .unwrap();
    let hook = install(&dir.path().join("private"), SnapshotMode::Oom).unwrap();
    let out = run(
        &"python3".into(),
        &hook,
        Some(&user),
        "import sys, atexit\natexit.register(lambda: print('torch' in sys.modules))\nprint('hello')",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\nFalse\n");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "sitecustomize");
    let st = hook.statuses();
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].hook, "on");
    assert!(!st[0].torch_imported && !st[0].cuda_initialised && !st[0].history);
    assert_eq!(st[0].errors, 0);
    assert!(hook.snapshots().is_empty());
    assert!(hook.log().is_none());
}

#[test]
fn a_cpu_torch_program_runs_unchanged_and_history_stays_off() {
    let Some(python) = std::env::var_os("LLM_OOM_TEST_PYTHON") else {
        eprintln!("LLM_OOM_TEST_PYTHON is not set: the torch part of the hook is not run here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let hook = install(&dir.path().join("private"), SnapshotMode::Always).unwrap();
    let out = run(
        &python,
        &hook,
        None,
        "import torch\nprint(torch.ones(3).sum().item(), torch.cuda.is_initialized())",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "3.0 False\n");
    let st = hook.statuses();
    assert_eq!(st.len(), 1, "{:?}", hook.log());
    assert!(st[0].torch_imported);
    assert!(st[0].torch.as_deref().is_some_and(|v| v.starts_with('2')));
    assert!(!st[0].cuda_initialised && !st[0].history);
    assert_eq!(st[0].errors, 0, "{:?}", hook.log());
    assert!(
        hook.snapshots().is_empty(),
        "no CUDA, no snapshot even with always"
    );
}

#[test]
fn python_commands_are_recognised() {
    let yes = |c: &[&str]| is_python_command(&c.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert!(yes(&["python", "app.py"]));
    assert!(yes(&["/usr/bin/python3", "-m", "x"]));
    assert!(yes(&["python3.11", "app.py"]));
    assert!(yes(&["uv", "run", "app.py"]));
    assert!(yes(&["accelerate", "launch", "train.py"]));
    assert!(yes(&["torchrun", "--nproc-per-node", "2", "train.py"]));
    assert!(yes(&["env", "CUDA_VISIBLE_DEVICES=0", "python3", "app.py"]));
    assert!(!yes(&["uv", "pip", "install", "x"]));
    assert!(!yes(&["llama-server", "-m", "x.gguf"]));
    assert!(!yes(&["pythonista"]));
    assert!(!yes(&[]));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("serve");
    std::fs::write(&script, "#!/usr/bin/env python3\nprint(1)\n").unwrap();
    assert!(yes(&[script.to_str().unwrap()]));
    let sh = dir.path().join("run.sh");
    std::fs::write(&sh, "#!/bin/sh\necho python\n").unwrap();
    assert!(!yes(&[sh.to_str().unwrap()]));
}
