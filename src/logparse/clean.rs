//! Turning whatever was pasted into lines a parser can read: invalid UTF-8 replaced, ANSI colour
//! codes removed, and progress bars (`\r`-rewritten lines) reduced to what was last shown.

/// Clean `raw` and return its lines; line numbers are 1-based indices into this vector + 1.
pub fn clean_lines(raw: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(raw);
    text.split('\n')
        .map(|line| {
            let line = line.strip_suffix('\r').unwrap_or(line);
            // A progress bar rewrites its line with '\r': keep the last non-empty segment.
            let shown = line
                .rsplit('\r')
                .find(|s| !s.trim().is_empty())
                .unwrap_or("");
            strip_ansi(shown)
        })
        .collect()
}

/// Remove ANSI escape sequences (CSI `ESC [ … letter`, OSC `ESC ] … BEL`, and lone escapes).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            if c != '\0' {
                out.push(c);
            }
            continue;
        }
        match chars.peek() {
            Some('[') => {
                chars.next();
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() || d == '~' {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                for d in chars.by_ref() {
                    if d == '\x07' {
                        break;
                    }
                }
            }
            Some(_) => {
                chars.next();
            }
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_colour_progress_and_garbage() {
        let raw = b"\x1b[31mError\x1b[0m: boom\nLoading:  10%|#   \rLoading: 100%|####| 3/3\n\xff\xfeok\r\n";
        let lines = clean_lines(raw);
        assert_eq!(lines[0], "Error: boom");
        assert_eq!(lines[1], "Loading: 100%|####| 3/3");
        assert!(lines[2].ends_with("ok"));
    }
}
