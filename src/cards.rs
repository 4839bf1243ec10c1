//! The cards people own, by the memory they really report, and what `--vram` means when a person
//! types it. A "24 GB" card's box is decimal marketing: an RTX 4090 reports 24,564 MiB in
//! `nvidia-smi` (`memory.total`), not 24 × 10⁹ bytes (22.4 GiB) — reading `24GB` literally would flip
//! a fit into an OOM. So `24GB` resolves to the 24 GB class's real total, a card name to that
//! card's, and `GiB`/`MiB` stay exact.
//!
//! Every total is `nvidia-smi`'s memory.total as quoted in public logs and READMEs (the index's
//! full-text search for the string `MiB / <total>MiB` next to the card's name; docs/models.md lists
//! them). Apple silicon shares its RAM: the GPU may use Metal's `recommendedMaxWorkingSetSize`,
//! commonly 75 % of RAM on machines of 64 GB and more (llama.cpp prints it at start-up; macOS
//! versions differ and `sysctl iogpu.wired_limit_mb` raises it), so those entries are 75 % of RAM.

use crate::error::InputError;
use crate::units::{group, Bytes, MIB};

/// One card: the ids `--vram` accepts, its name, and its total in MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Card {
    pub ids: &'static [&'static str],
    pub name: &'static str,
    pub mib: u64,
}

impl Card {
    pub fn bytes(&self) -> u64 {
        self.mib * MIB
    }
}

const fn c(ids: &'static [&'static str], name: &'static str, mib: u64) -> Card {
    Card { ids, name, mib }
}

/// nvidia-smi `memory.total` (MiB) of each card, as public nvidia-smi captures show it.
pub const CARDS: &[Card] = &[
    c(&["rtx4060-8g", "rtx4060"], "RTX 4060 8 GB", 8188),
    c(&["rtx3080", "rtx3080-10g"], "RTX 3080 10 GB", 10240),
    c(
        &["rtx2080ti", "gtx1080ti"],
        "RTX 2080 Ti / GTX 1080 Ti 11 GB",
        11264,
    ),
    c(&["rtx4070", "rtx4070ti"], "RTX 4070 / 4070 Ti 12 GB", 12282),
    c(&["t4"], "Tesla T4 16 GB", 15360),
    c(&["v100-16g", "v100"], "Tesla V100 16 GB", 16160),
    c(
        &["rtx4080", "rtx4070ti-super", "rtx-a4000"],
        "RTX 4080 16 GB",
        16376,
    ),
    c(&["rtx4060ti-16g"], "RTX 4060 Ti 16 GB", 16380),
    c(&["rtx4000-ada"], "RTX 4000 Ada 20 GB", 20475),
    c(&["a10", "a10g"], "A10 / A10G 24 GB", 23028),
    c(&["l4"], "L4 24 GB", 23034),
    c(&["rtx4090", "rtx3090ti"], "RTX 4090 24 GB", 24564),
    c(&["rtx3090"], "RTX 3090 24 GB", 24576),
    c(&["v100-32g"], "Tesla V100 32 GB", 32510),
    c(&["rtx5090"], "RTX 5090 32 GB", 32607),
    c(&["a100-40g", "a100-40gb"], "A100 40 GB", 40960),
    c(&["l40s", "l40", "a40"], "L40S / L40 / A40 48 GB", 46068),
    c(
        &["rtx-a6000", "a6000", "rtx6000-ada"],
        "RTX A6000 / 6000 Ada 48 GB",
        49140,
    ),
    c(
        &["h100", "h100-80g", "h100-sxm", "h100-pcie"],
        "H100 80 GB",
        81559,
    ),
    c(&["a100-80g", "a100-80gb", "a100"], "A100 80 GB", 81920),
    c(&["h100-nvl"], "H100 NVL 94 GB", 95830),
    c(
        &["rtx-pro-6000", "rtx6000-pro"],
        "RTX PRO 6000 Blackwell 96 GB",
        97887,
    ),
    c(&["h200", "h200-141g"], "H200 141 GB", 143771),
    // Apple: 75 % of RAM (Metal's recommendedMaxWorkingSetSize), in MiB.
    c(
        &["m1-max-64g", "m2-max-64g", "m3-max-64g", "m4-max-64g"],
        "Apple M-series Max 64 GB (GPU working set)",
        49152,
    ),
    c(
        &["m2-max-96g", "m3-max-96g"],
        "Apple M2/M3 Max 96 GB (GPU working set)",
        73728,
    ),
    c(
        &["m3-max-128g", "m4-max-128g"],
        "Apple M3/M4 Max 128 GB (GPU working set)",
        98304,
    ),
    c(
        &["m1-ultra-128g", "m2-ultra-128g"],
        "Apple M1/M2 Ultra 128 GB (GPU working set)",
        98304,
    ),
    c(
        &["m2-ultra-192g", "m1-ultra-192g"],
        "Apple M2 Ultra 192 GB (GPU working set)",
        147456,
    ),
    c(
        &["m3-ultra-512g"],
        "Apple M3 Ultra 512 GB (GPU working set)",
        393216,
    ),
];

/// The card a person with an "N GB" card most likely has: the smallest common total of that class,
/// so a plan for the class fits every card in it.
const CLASSES: &[(u64, &str)] = &[
    (8, "rtx4060-8g"),
    (10, "rtx3080"),
    (11, "rtx2080ti"),
    (12, "rtx4070"),
    (16, "rtx4080"),
    (20, "rtx4000-ada"),
    (24, "rtx4090"),
    (32, "rtx5090"),
    (40, "a100-40g"),
    (48, "l40s"),
    (80, "h100"),
    (94, "h100-nvl"),
    (96, "rtx-pro-6000"),
    (141, "h200"),
];

pub fn find(id: &str) -> Option<&'static Card> {
    let want = id.trim().to_ascii_lowercase().replace(['_', ' '], "-");
    let squashed = want.replace('-', "");
    CARDS.iter().find(|c| {
        c.ids
            .iter()
            .any(|i| *i == want || i.replace('-', "") == squashed)
    })
}

/// What `--vram` resolved to: the bytes planned for and how the text was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vram {
    pub bytes: u64,
    /// A card name or an `NGB` class was resolved to a card's total (not an exact size).
    pub card: bool,
    /// e.g. `24GB → RTX 4090 24 GB class, 24,564 MiB`.
    pub resolved: String,
}

/// `--vram`: a card name (`rtx4090`, `h100`, `m2-ultra-192g`), `NGB` with N a common card size
/// (that class's real total), any other decimal size (`50GB` = 50 × 10⁹), or an exact binary size
/// (`24GiB`, `24564MiB`). A bare number is refused: it could be GiB, GB or bytes.
pub fn parse_vram(s: &str) -> Result<Vram, InputError> {
    let t = s.trim();
    if let Some(card) = find(t) {
        return Ok(Vram {
            bytes: card.bytes(),
            card: true,
            resolved: format!(
                "{t} → {}, {} MiB ({} bytes)",
                card.name,
                group(card.mib),
                group(card.bytes())
            ),
        });
    }
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(InputError::Usage(format!(
            "--vram {t} has no unit; write {t}GiB, {t}GB or a card name like rtx4090"
        )));
    }
    let lower = t.to_ascii_lowercase();
    if let Some(num) = lower.strip_suffix("gb").map(str::trim) {
        if let Ok(n) = num.parse::<u64>() {
            if let Some((_, id)) = CLASSES.iter().find(|(gb, _)| *gb == n) {
                if let Some(card) = find(id) {
                    return Ok(Vram {
                        bytes: card.bytes(),
                        card: true,
                        resolved: format!(
                            "{t} → {} class, {} MiB ({} bytes)",
                            card.name,
                            group(card.mib),
                            group(card.bytes())
                        ),
                    });
                }
            }
        }
    }
    let b: Bytes = t.parse()?;
    Ok(Vram {
        bytes: b.0,
        card: false,
        resolved: format!("{t} → {} bytes ({})", group(b.0), Bytes(b.0)),
    })
}

/// `--vram` naming several GPUs: a comma list (`24GiB,24GiB`, `rtx4090,rtx3090`) whose items may
/// repeat (`2x24GiB`, `2xrtx4090`, `4xh100`). One device is the list of one.
pub fn parse_devices(s: &str) -> Result<Vec<Vram>, InputError> {
    let mut out = Vec::new();
    for item in s.split(',') {
        let t = item.trim();
        if t.is_empty() {
            return Err(InputError::Usage(format!(
                "--vram {s}: an empty device between commas; write it like 24GiB,12GiB"
            )));
        }
        let (n, each) = match t.split_once(['x', 'X']) {
            Some((n, rest)) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => {
                let n: usize = n.parse().map_err(|_| too_many(t))?;
                (n, rest)
            }
            _ => (1, t),
        };
        if n == 0 || out.len() + n > MAX_GPUS {
            return Err(too_many(t));
        }
        let v = parse_vram(each)?;
        out.extend(std::iter::repeat_n(v, n));
    }
    Ok(out)
}

/// The most GPUs one plan takes (a node of 8, times 8 nodes).
pub const MAX_GPUS: usize = 64;

fn too_many(t: &str) -> InputError {
    InputError::Usage(format!(
        "--vram {t}: write 1 to {MAX_GPUS} devices, like 2x24GiB or 24GiB,12GiB"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::GIB;

    #[test]
    fn a_24_gb_card_is_its_real_total() {
        let v = parse_vram("24GB").unwrap();
        assert_eq!(v.bytes, 24_564 * MIB);
        assert!(v.resolved.contains("RTX 4090") && v.resolved.contains("24,564 MiB"));
        assert_eq!(parse_vram("rtx4090").unwrap().bytes, 24_564 * MIB);
        assert_eq!(parse_vram("RTX 3090").unwrap().bytes, 24_576 * MIB);
        assert_eq!(parse_vram("h200").unwrap().bytes, 143_771 * MIB);
        assert_eq!(parse_vram("a100-80g").unwrap().bytes, 81_920 * MIB);
        assert_eq!(parse_vram("80GB").unwrap().bytes, 81_559 * MIB);
        // Apple: 75 % of 192 GiB.
        assert_eq!(parse_vram("m2-ultra-192g").unwrap().bytes, 144 * GIB);
    }

    #[test]
    fn binary_units_stay_exact_and_odd_sizes_are_decimal() {
        assert_eq!(parse_vram("24GiB").unwrap().bytes, 24 * GIB);
        assert_eq!(parse_vram("24564MiB").unwrap().bytes, 24_564 * MIB);
        assert_eq!(parse_vram("50GB").unwrap().bytes, 50_000_000_000);
        assert_eq!(parse_vram("23.5GB").unwrap().bytes, 23_500_000_000);
    }

    #[test]
    fn a_bare_number_and_nonsense_are_refused() {
        let e = parse_vram("24").unwrap_err().to_string();
        assert!(e.contains("24GiB, 24GB or a card name like rtx4090"), "{e}");
        assert!(parse_vram("24XB").is_err());
        assert!(parse_vram("rtx9999").is_err());
        assert!(parse_vram("").is_err());
    }

    #[test]
    fn several_devices_are_a_list_or_a_count() {
        let b =
            |s: &str| -> Vec<u64> { parse_devices(s).unwrap().iter().map(|v| v.bytes).collect() };
        assert_eq!(b("24GiB,24GiB"), vec![24 * GIB, 24 * GIB]);
        assert_eq!(b("2x24GiB"), vec![24 * GIB, 24 * GIB]);
        assert_eq!(b("2xrtx4090"), vec![24_564 * MIB; 2]);
        assert_eq!(b("24GiB, 12GiB"), vec![24 * GIB, 12 * GIB]);
        assert_eq!(b("rtx4090"), vec![24_564 * MIB]);
        assert_eq!(
            b("2x24GB,rtx3090"),
            vec![24_564 * MIB, 24_564 * MIB, 24_576 * MIB]
        );
        for bad in ["0x24GiB", "65x24GiB", "2x", "24GiB,,24GiB", "2x24"] {
            assert!(parse_devices(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_class_names_a_card_of_that_size() {
        for (gb, id) in CLASSES {
            let card = find(id).unwrap_or_else(|| panic!("{id}"));
            let gib = card.mib as f64 / 1024.0;
            // within what decimal/binary and reserved memory explain
            assert!(
                (*gb as f64 * 0.86..*gb as f64 * 1.05).contains(&gib),
                "{gb} GB → {gib}"
            );
        }
    }
}
