//! Any bytes as a checkpoint's `model.safetensors`: the header reader refuses them or gives the
//! checkpoint's weights, without a panic or an overflow (debug assertions are on).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llm_oom::model::checkpoint::from_dir;

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile_dir() else {
        return;
    };
    if std::fs::write(dir.join("model.safetensors"), data).is_err() {
        return;
    }
    if let Ok(Some(w)) = from_dir(&dir, 32) {
        let _ = w.note();
    }
});

/// One folder per fuzzing process, rewritten for every input.
fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("llm-oom-fuzz-st-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
