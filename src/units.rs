//! Byte sizes as people type them (`24GiB`, `80GB`, `512M`) and as reports print them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::InputError;

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// A number of bytes. Parsing follows the convention of `free` and `docker`: `KiB/MiB/GiB/TiB` and
/// bare `K/M/G/T` are powers of 1024, `KB/MB/GB/TB` powers of 1000 (so `24GB` is a little less than a
/// "24 GB" card really has, which errs on the safe side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct Bytes(pub u64);

impl Bytes {
    pub fn gib(self) -> f64 {
        self.0 as f64 / GIB as f64
    }
    pub fn mib(self) -> f64 {
        self.0 as f64 / MIB as f64
    }
}

impl FromStr for Bytes {
    type Err = InputError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || InputError::Size(s.to_string());
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let value: f64 = num.parse().map_err(|_| bad())?;
        let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kib" => KIB as f64,
            "m" | "mib" => MIB as f64,
            "g" | "gib" => GIB as f64,
            "t" | "tib" => (GIB * 1024) as f64,
            "kb" => 1e3,
            "mb" => 1e6,
            "gb" => 1e9,
            "tb" => 1e12,
            _ => return Err(bad()),
        };
        let bytes = value * mult;
        if !bytes.is_finite() || bytes <= 0.0 || bytes > 1e18 {
            return Err(bad());
        }
        Ok(Bytes(bytes.round() as u64))
    }
}

/// A size flag as a person types it (`--host-ram 64GiB`, `--vram-limit 16MiB`): the one reading
/// every size flag shares. A bare number is refused (GiB? GB? bytes? `--host-ram 64` once meant
/// 64 bytes and sent every layer to disk), then the [`Bytes`] forms.
pub fn parse_size(flag: &str, s: &str) -> Result<u64, InputError> {
    let t = s.trim();
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(InputError::Usage(format!(
            "{flag} {t} has no unit; add a unit, e.g. {t}GiB or {t}GB"
        )));
    }
    t.parse::<Bytes>().map(|b| b.0).map_err(|_| {
        InputError::Usage(format!(
            "{flag} `{t}` is not a memory size; write it like 64GiB, 80GB or 512MiB"
        ))
    })
}

impl fmt::Display for Bytes {
    /// Human form with three significant figures in the largest binary unit: `13.5 GiB`, `128 KiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        let (v, u) = if self.0 >= GIB {
            (b / GIB as f64, "GiB")
        } else if self.0 >= MIB {
            (b / MIB as f64, "MiB")
        } else if self.0 >= KIB {
            (b / KIB as f64, "KiB")
        } else {
            return write!(f, "{} B", self.0);
        };
        if v >= 100.0 {
            write!(f, "{v:.0} {u}")
        } else if v >= 10.0 {
            write!(f, "{v:.1} {u}")
        } else {
            write!(f, "{v:.2} {u}")
        }
    }
}

/// `1234567` → `1,234,567`: token counts read better grouped.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_and_decimal_units() {
        assert_eq!("24GiB".parse::<Bytes>().unwrap(), Bytes(24 * GIB));
        assert_eq!("24G".parse::<Bytes>().unwrap(), Bytes(24 * GIB));
        assert_eq!("24 gb".parse::<Bytes>().unwrap(), Bytes(24_000_000_000));
        assert_eq!("0.5GiB".parse::<Bytes>().unwrap(), Bytes(GIB / 2));
        assert_eq!("512MiB".parse::<Bytes>().unwrap(), Bytes(512 * MIB));
        assert_eq!("1000".parse::<Bytes>().unwrap(), Bytes(1000));
    }

    #[test]
    fn a_size_flag_needs_its_unit() {
        assert_eq!(parse_size("--host-ram", "64GiB").unwrap(), 64 * GIB);
        assert_eq!(parse_size("--host-ram", " 64 GB ").unwrap(), 64_000_000_000);
        let e = parse_size("--host-ram", "64").unwrap_err().to_string();
        assert!(
            e.contains("--host-ram 64 has no unit; add a unit, e.g. 64GiB"),
            "{e}"
        );
        let e = parse_size("--host-ram", "lots").unwrap_err().to_string();
        assert!(
            e.contains("--host-ram") && e.contains("not a memory size"),
            "{e}"
        );
    }

    #[test]
    fn rejects_nonsense() {
        for s in ["24XB", "", "GiB", "-3GiB", "0", "1e400GiB", "1.2.3G"] {
            assert!(s.parse::<Bytes>().is_err(), "{s} should be rejected");
        }
    }

    #[test]
    fn displays_three_figures() {
        assert_eq!(Bytes(14_483_464_192).to_string(), "13.5 GiB");
        assert_eq!(Bytes(131_072).to_string(), "128 KiB");
        assert_eq!(Bytes(512).to_string(), "512 B");
        assert_eq!(group(7_241_732_096), "7,241,732,096");
        assert_eq!(group(12), "12");
    }
}
