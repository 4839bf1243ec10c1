//! Scratch folders: a new owner-only folder under the system's temporary directory for each use,
//! its name random and made exclusively (tempfile), never one named by the process id, which an
//! earlier run with the same id (every run in a container can have the same one) or another user
//! may have made first. The caller removes it.

use std::path::PathBuf;

/// A new folder `<tmp>/<prefix>XXXXXX`, mode 0700, kept until the caller removes it. Its error
/// names the path it could not make (tempfile's own words).
pub fn private_dir(prefix: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    Ok(tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()?
        .keep())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn each_folder_is_new_and_owner_only() {
        let (Ok(a), Ok(b)) = (private_dir("llm-oom-test-"), private_dir("llm-oom-test-")) else {
            panic!("no scratch folder");
        };
        assert_ne!(a, b);
        for d in [a, b] {
            let mode = std::fs::metadata(&d).map(|m| m.permissions().mode() & 0o777);
            assert_eq!(mode.ok(), Some(0o700), "{}", d.display());
            assert!(d
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("llm-oom-test-")));
            let _ = std::fs::remove_dir(&d);
        }
    }

    #[test]
    fn a_folder_that_cannot_be_made_is_named_in_the_error() {
        let e = private_dir("llm-oom-no-such-folder/x-").map(|d| d.display().to_string());
        let said = e.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(said.contains("llm-oom-no-such-folder/x-"), "{said}");
    }
}
