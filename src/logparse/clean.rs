//! Turning whatever was pasted into lines a parser can read: UTF-16 decoded, NUL bytes dropped,
//! invalid UTF-8 replaced, ANSI colour codes removed, CR-only line ends split, and progress bars
//! (`\r`-rewritten lines) reduced to what was last shown.

use std::borrow::Cow;

/// Clean `raw` and return its lines; line numbers are 1-based indices into this vector + 1.
pub fn clean_lines(raw: &[u8]) -> Vec<String> {
    let text = decode(raw);
    // A log written with old Mac line ends has '\r' and no '\n': each '\r' ends a line there.
    let cr_only = !text.contains('\n') && text.contains('\r');
    if cr_only {
        return text.split('\r').map(strip_ansi).collect();
    }
    text.split('\n').map(shown_line).collect()
}

/// A progress bar rewrites its line with '\r': keep the last non-empty segment.
fn shown_line(line: &str) -> String {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let shown = line
        .rsplit('\r')
        .find(|s| !s.trim().is_empty())
        .unwrap_or("");
    strip_ansi(shown)
}

/// Which UTF-16 byte order `raw` is in, if it is UTF-16: by its byte-order mark, else by NUL
/// bytes filling one parity of positions (ASCII text in UTF-16) and not the other.
/// Whether `raw` reads as UTF-16 (a byte-order mark, or NULs in every other byte).
pub fn is_utf16(raw: &[u8]) -> bool {
    utf16_order(raw).is_some()
}

fn utf16_order(raw: &[u8]) -> Option<(bool, usize)> {
    match raw {
        [0xFF, 0xFE, ..] => return Some((true, 2)),
        [0xFE, 0xFF, ..] => return Some((false, 2)),
        _ => {}
    }
    let head = &raw[..raw.len().min(4096)];
    if head.len() < 8 {
        return None;
    }
    let nul_at = |parity: usize| {
        head.iter()
            .skip(parity)
            .step_by(2)
            .filter(|&&b| b == 0)
            .count()
    };
    let half = head.len() / 2;
    let (even, odd) = (nul_at(0), nul_at(1));
    if odd * 10 >= half * 9 && even * 10 <= half {
        Some((true, 0))
    } else if even * 10 >= half * 9 && odd * 10 <= half {
        Some((false, 0))
    } else {
        None
    }
}

/// The text of a log in any encoding it is likely to come in: UTF-16 (LE/BE) is decoded, and in
/// anything else NUL bytes are dropped (a log is text; NULs come from a crashed writer or a
/// pre-allocated file) and invalid UTF-8 is replaced.
pub fn decode(raw: &[u8]) -> Cow<'_, str> {
    if let Some((le, skip)) = utf16_order(raw) {
        let units = raw[skip..].chunks_exact(2).map(|p| {
            if le {
                u16::from_le_bytes([p[0], p[1]])
            } else {
                u16::from_be_bytes([p[0], p[1]])
            }
        });
        let text: String = char::decode_utf16(units)
            .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
            .filter(|&c| c != '\0')
            .collect();
        return Cow::Owned(text);
    }
    if raw.contains(&0) {
        let kept: Vec<u8> = raw.iter().copied().filter(|&b| b != 0).collect();
        return Cow::Owned(String::from_utf8_lossy(&kept).into_owned());
    }
    String::from_utf8_lossy(raw)
}

/// Remove ANSI escape sequences (CSI `ESC [ … letter`, OSC `ESC ] … BEL`, and lone escapes).
pub fn strip_ansi(s: &str) -> String {
    // Most lines have neither: they are kept as they are, without the walk over their chars.
    if !s.contains(['\x1b', '\0']) {
        return s.to_string();
    }
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

    #[test]
    fn utf16_with_and_without_bom_and_cr_only() {
        let text = "line one\nCUDA out of memory\n";
        let le: Vec<u8> = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
        let be: Vec<u8> = text.encode_utf16().flat_map(u16::to_be_bytes).collect();
        let mut bom = vec![0xFF, 0xFE];
        bom.extend_from_slice(&le);
        for raw in [le, be, bom] {
            assert_eq!(clean_lines(&raw)[1], "CUDA out of memory");
        }
        assert_eq!(clean_lines(b"a\rb\rc").len(), 3);
        assert_eq!(clean_lines(b"a\0b\0\0\0c\n")[0], "abc");
    }
}
