//! The cards people own, by the memory they really report, and what `--vram` means when a person
//! types it. A "24 GB" card's box is decimal marketing: an RTX 4090 reports 24,564 MiB in
//! `nvidia-smi` (`memory.total`), not 24 × 10⁹ bytes (22.4 GiB) — reading `24GB` literally would flip
//! a fit into an OOM. So `24GB` resolves to the smallest real total of the 24 GB class (a range:
//! an A10 reports 23,028 MiB, an RTX 3090 24,576), a card name to that
//! card's, and `GiB`/`MiB` stay exact.
//!
//! Every total is `nvidia-smi`'s memory.total as quoted in public logs and READMEs (the index's
//! full-text search for the string `MiB / <total>MiB` next to the card's name; docs/models.md lists
//! them). Apple silicon, the DGX Spark and Strix Halo share the machine's RAM ([`Unified`]): an
//! Apple name is its working set ([`apple_working_set_mib`]), the others what CUDA or Vulkan count;
//! `budget::unified` says what each engine counts there.

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

/// nvidia-smi `memory.total` (MiB) of each card, as public nvidia-smi captures show it (AMD:
/// `rocm-smi --showmeminfo vram`). Ids are matched after [`canonical`]: case, spaces, hyphens,
/// an `NVIDIA`/`GeForce`/`AMD`/`Instinct`/`Tesla` prefix, a trailing `GPU` and `Mobile` (=
/// `laptop`) do not matter, so `NVIDIA GeForce RTX 4090` as nvidia-smi prints it is `rtx4090`.
pub const CARDS: &[Card] = &[
    c(
        &["rtx4060-8g", "rtx4060", "rtx4060ti", "rtx4060ti-8g"],
        "RTX 4060 / 4060 Ti 8 GB",
        8188,
    ),
    c(
        &["rtx4060-laptop", "rtx4070-laptop"],
        "RTX 4060 / 4070 Laptop 8 GB",
        8188,
    ),
    c(
        &[
            "rtx3060ti",
            "rtx3070",
            "rtx3070ti",
            "rtx3060ti-8g",
            "rtx3070-8g",
        ],
        "RTX 3060 Ti / 3070 / 3070 Ti 8 GB",
        8192,
    ),
    c(&["rtx3080", "rtx3080-10g"], "RTX 3080 10 GB", 10240),
    c(
        &["rtx2080ti", "gtx1080ti"],
        "RTX 2080 Ti / GTX 1080 Ti 11 GB",
        11264,
    ),
    c(&["rtx5070"], "RTX 5070 12 GB", 12227),
    c(
        &["rtx4070", "rtx4070ti", "rtx4070-super"],
        "RTX 4070 / 4070 Ti / 4070 Super 12 GB",
        12282,
    ),
    c(&["rtx4080-laptop"], "RTX 4080 Laptop 12 GB", 12282),
    c(
        &["rtx3060", "rtx3060-12g", "rtx3080-12g", "rtx3080ti"],
        "RTX 3060 / 3080 12 GB / 3080 Ti 12 GB",
        12288,
    ),
    c(&["t4"], "Tesla T4 16 GB", 15360),
    c(
        &["v100-16g", "v100", "v100-sxm2-16g"],
        "Tesla V100 16 GB",
        16160,
    ),
    c(&["rtx5080", "rtx5070ti"], "RTX 5080 / 5070 Ti 16 GB", 16303),
    c(&["rtx5060ti", "rtx5060ti-16g"], "RTX 5060 Ti 16 GB", 16311),
    c(
        &["rtx4080", "rtx4080-super", "rtx4070ti-super", "rtx-a4000"],
        "RTX 4080 / 4080 Super / 4070 Ti Super 16 GB",
        16376,
    ),
    c(&["rtx4090-laptop"], "RTX 4090 Laptop 16 GB", 16376),
    c(&["rtx4060ti-16g"], "RTX 4060 Ti 16 GB", 16380),
    c(&["rtx4000-ada"], "RTX 4000 Ada 20 GB", 20475),
    c(&["a10", "a10g"], "A10 / A10G 24 GB", 23028),
    c(&["l4"], "L4 24 GB", 23034),
    c(&["rtx4090", "rtx3090ti"], "RTX 4090 / 3090 Ti 24 GB", 24564),
    c(&["rtx3090"], "RTX 3090 24 GB", 24576),
    c(&["v100-32g", "v100-sxm2-32g"], "Tesla V100 32 GB", 32510),
    c(&["rtx5090"], "RTX 5090 32 GB", 32607),
    c(
        &["a100-40g", "a100-sxm4-40g", "a100-pcie-40g"],
        "A100 40 GB",
        40960,
    ),
    c(&["l40s", "l40", "a40"], "L40S / L40 / A40 48 GB", 46068),
    c(
        &["rtx-a6000", "a6000", "rtx6000-ada"],
        "RTX A6000 / 6000 Ada 48 GB",
        49140,
    ),
    // One MI250X is two GCDs, and PyTorch, vLLM and rocm-smi each see a GCD as its own device of
    // 64 GB: `mi250x` is one such device (`2xmi250x` the whole card).
    c(&["mi250x", "mi250x-gcd"], "MI250X, one GCD of 64 GB", 65520),
    c(
        &[
            "h100",
            "h100-80g",
            "h100-sxm",
            "h100-pcie",
            "h100-80g-hbm3",
            "h100-sxm5-80g",
        ],
        "H100 80 GB",
        81559,
    ),
    c(
        &["a100-80g", "a100", "a100-sxm4-80g", "a100-80g-pcie"],
        "A100 80 GB",
        81920,
    ),
    c(&["h100-nvl"], "H100 NVL 94 GB", 95830),
    c(
        &["rtx-pro-6000", "rtx6000-pro"],
        "RTX PRO 6000 Blackwell 96 GB",
        97887,
    ),
    // nvidia-smi prints the same total for an H20 and for a GH200's 96 GB of HBM (its
    // `480GB` and `120GB` names count the Grace CPU's memory too).
    c(&["h20", "h20-96g"], "H20 96 GB", 97871),
    c(
        &["gh200", "gh200-96g", "gh200-480g", "gh200-120g"],
        "GH200 96 GB",
        97871,
    ),
    c(&["h200", "h200-141g"], "H200 141 GB", 143771),
    c(&["b200"], "B200 180 GB", 183359),
    // One Blackwell GPU of a GB200 superchip.
    c(&["gb200"], "GB200 186 GB", 189471),
    // rocm-smi's VRAM total of an MI300X (206,141,652,992 bytes).
    c(&["mi300x"], "MI300X 192 GB", 196592),
    c(&["b300", "b300-sxm6-ac"], "B300 288 GB", 275040),
    c(&["gb300"], "GB300 288 GB", 284208),
    // rocm-smi's VRAM total of an MI355X and of an MI350X (309,220,868,096 bytes).
    c(&["mi355x", "mi350x"], "MI355X / MI350X 288 GB", 294896),
    // Apple: Metal's recommendedMaxWorkingSetSize, 75 % of RAM above 36 GB (apple_working_set_mib).
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
    // NVIDIA DGX Spark (GB10): 128 GB of LPDDR5X shared with the CPU; CUDA's total is 121.69 GiB
    // (vllm-project/vllm#48140, llamastash#80).
    c(
        &["dgx-spark", "gb10", "dgxspark-128g"],
        "DGX Spark GB10 128 GB (unified)",
        124_611,
    ),
    // AMD Ryzen AI Max+ 395 (Radeon 8060S, gfx1151) with 128 GB: what llama.cpp's Vulkan backend
    // counts (the carve-out's heap plus the shared one), 108.62–111.89 GiB at carve-outs of 32, 64
    // and 96 GiB (unslothai/unsloth#10418); the smallest.
    c(
        &[
            "strix-halo",
            "strix-halo-128g",
            "ryzen-ai-max-395",
            "ryzen-ai-max+-395",
            "8060s",
        ],
        "Strix Halo (Ryzen AI Max+ 395) 128 GB (unified, Vulkan's view)",
        111_227,
    ),
];

/// A GPU that shares the machine's RAM: what the engines count as its memory differs from the
/// RAM, and from engine to engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unified {
    /// Apple silicon with this much RAM (GB as sold): Metal's `recommendedMaxWorkingSetSize`.
    Apple { ram_gb: u64 },
    /// NVIDIA's GB10: CUDA's free memory is the kernel's `MemFree`.
    DgxSpark,
    /// AMD's Strix Halo: a BIOS carve-out plus GTT, seen differently by ROCm and Vulkan.
    StrixHalo,
}

/// The unified-memory machine a card name stands for, if it is one.
pub fn unified(name: &str) -> Option<Unified> {
    let n = canonical(name);
    if let Some(ram_gb) = apple_ram_gb(&n) {
        return Some(Unified::Apple { ram_gb });
    }
    let card = find(name)?;
    if card.ids.contains(&"dgx-spark") {
        Some(Unified::DgxSpark)
    } else if card.ids.contains(&"strix-halo") {
        Some(Unified::StrixHalo)
    } else {
        None
    }
}

/// The RAM of an Apple silicon name (`m4-pro-48g`, `M3 Max 128GB`, `mac-24g`), from its
/// canonical form: a chip `m1`…`m9` (with `pro`, `max` or `ultra`) or `mac`, then `NNg`.
fn apple_ram_gb(canon: &str) -> Option<u64> {
    let rest = canon.strip_prefix("apple").unwrap_or(canon);
    let rest = if let Some(r) = rest.strip_prefix("mac") {
        r
    } else {
        let r = rest.strip_prefix('m')?;
        let r = r.strip_prefix(|c: char| c.is_ascii_digit())?;
        // `Tesla M40 24GB` is `m4024g`: a size never starts with 0.
        if r.starts_with('0') {
            return None;
        }
        ["pro", "max", "ultra"]
            .iter()
            .find_map(|t| r.strip_prefix(t))
            .unwrap_or(r)
    };
    let gb: u64 = rest.strip_suffix('g')?.parse().ok()?;
    (4..=1024).contains(&gb).then_some(gb)
}

/// Metal's default GPU working set for an Apple machine of `ram_gb` GB, in MiB: two thirds of
/// the RAM up to 36 GB and three quarters above, the share macOS 13–15 gives
/// (`recommendedMaxWorkingSetSize`: 5,461.34 MB on an 8 GB M1 in a llama.cpp log of the corpus,
/// 49,152 MB on a 64 GB M1 Max). macOS 26 gives more (107.52 GiB measured on two 128 GB
/// machines, antirez/ds4#893), so this is the floor of the range, and the safe side.
pub fn apple_working_set_mib(ram_gb: u64) -> u64 {
    let ram_mib = ram_gb.saturating_mul(1024);
    if ram_gb <= 36 {
        ram_mib.saturating_mul(2) / 3
    } else {
        ram_mib.saturating_mul(3) / 4
    }
}

/// The sizes people type as `NGB` for a class of cards. A class is a range of real totals (the
/// "24 GB" cards report 23,028 MiB for an A10 up to 24,576 MiB for an RTX 3090), and a plan for
/// the class is a plan for its smallest card, so it fits every card in it.
const CLASSES: &[u64] = &[8, 10, 11, 12, 16, 20, 24, 32, 40, 48, 80, 94, 96, 141];

/// The box size a card is sold as, from its name (`… 24 GB`); Apple's entries are working sets of
/// shared RAM, not cards of a class.
fn nominal_gb(card: &Card) -> Option<u64> {
    if card.name.contains("working set") {
        return None;
    }
    let head = card.name.strip_suffix(" GB")?;
    head.rsplit(' ').next()?.parse().ok()
}

/// The cards of the `gb` class, smallest total first.
fn class(gb: u64) -> Vec<&'static Card> {
    let mut cards: Vec<&Card> = CARDS.iter().filter(|c| nominal_gb(c) == Some(gb)).collect();
    cards.sort_by_key(|c| c.mib);
    cards
}

/// A card name as people type it, reduced to what tells cards apart: lower case, no spaces,
/// hyphens or underscores, no vendor or brand prefix (`NVIDIA`, `GeForce`, `AMD`, `Instinct`,
/// `Tesla`), no trailing `GPU`, `Mobile` read as `laptop`, and `NNGB` as `NNg`. So `NVIDIA GeForce
/// RTX 4090`, `RTX 4060 Laptop GPU`, `rtx-4070-ti-super` and `A100-SXM4-80GB` each meet an id.
pub fn canonical(name: &str) -> String {
    let mut t: String = name
        .trim()
        .to_ascii_lowercase()
        .chars()
        .filter(|c| !matches!(c, ' ' | '-' | '_' | '\t'))
        .collect();
    for prefix in ["nvidia", "amd", "geforce", "radeon", "instinct", "tesla"] {
        if let Some(rest) = t.strip_prefix(prefix) {
            t = rest.to_string();
        }
    }
    if let Some(rest) = t.strip_suffix("gpu") {
        t = rest.to_string();
    }
    t = t.replace("mobile", "laptop").replace("gb", "g");
    t
}

pub fn find(id: &str) -> Option<&'static Card> {
    let want = canonical(id);
    if want.is_empty() {
        return None;
    }
    CARDS
        .iter()
        .find(|c| c.ids.iter().any(|i| canonical(i) == want))
}

/// The card ids nearest to `name` (edit distance on [`canonical`] forms), at most `n`, nearest
/// first; for the message that refuses an unknown name.
pub fn close_matches(name: &str, n: usize) -> Vec<&'static str> {
    let want = canonical(name);
    let mut scored: Vec<(usize, &'static str)> = CARDS
        .iter()
        .flat_map(|c| c.ids.iter().copied())
        .map(|id| {
            let id_c = canonical(id);
            let d = edit_distance(&want, &id_c);
            (d, id)
        })
        .collect();
    scored.sort_by_key(|&(d, id)| (d, id.len()));
    let mut out: Vec<&'static str> = Vec::new();
    for (_, id) in scored {
        if out.len() == n {
            break;
        }
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// Levenshtein distance over bytes (names are short ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// `s` looks like a card name (it starts with a letter), not a size.
fn looks_like_a_name(s: &str) -> bool {
    s.trim().starts_with(|c: char| c.is_ascii_alphabetic())
}

/// What `--vram` resolved to: the bytes planned for and how the text was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vram {
    pub bytes: u64,
    /// The name that resolved to a card, as typed (`rtx3090ti`, `NVIDIA H100 80GB HBM3`); `None`
    /// for a size or a class. An entry may stand for several cards, so this is what tells them apart.
    pub named: Option<String>,
    /// A card name or an `NGB` class was resolved to a card's total (not an exact size).
    pub card: bool,
    /// e.g. `24GB → RTX 4090 24 GB class, 24,564 MiB`.
    pub resolved: String,
}

/// The CUDA compute capability of a card of this table (its `name` or an `nvidia-smi` name), from
/// NVIDIA's list of CUDA GPUs (developer.nvidia.com/cuda-gpus): `None` for AMD and Apple parts and
/// for names it cannot tell. transformers' constants beside PyTorch's pool (the CUDA context,
/// cuDNN's and cuBLAS's workspaces) are measured on 9.0 only (H100, H200).
pub fn compute_capability(name: &str) -> Option<(u32, u32)> {
    let n = canonical(name);
    let table: &[(&str, (u32, u32))] = &[
        ("gh200", (9, 0)),
        ("h100", (9, 0)),
        ("h200", (9, 0)),
        ("h800", (9, 0)),
        ("h20", (9, 0)),
        ("b200", (10, 0)),
        ("b100", (10, 0)),
        ("gb200", (10, 0)),
        ("b300", (10, 3)),
        ("gb300", (10, 3)),
        ("rtx50", (12, 0)),
        ("rtxpro6000", (12, 0)),
        ("rtx40", (8, 9)),
        ("l40", (8, 9)),
        ("l4", (8, 9)),
        ("rtx6000ada", (8, 9)),
        ("rtx30", (8, 6)),
        ("a10", (8, 6)),
        ("a40", (8, 6)),
        ("a6000", (8, 6)),
        ("rtxa6000", (8, 6)),
        ("a100", (8, 0)),
        ("a800", (8, 0)),
        ("a30", (8, 0)),
        ("rtx20", (7, 5)),
        ("t4", (7, 5)),
        ("v100", (7, 0)),
    ];
    // The longest prefix wins: `a100` over `a10`, `l40` over `l4`, `gh200` over `h200`.
    // Prefixes are compared as `canonical` writes them (`gb200` is `g200` there, as the name is).
    table
        .iter()
        .map(|(prefix, cc)| (canonical(prefix), cc))
        .filter(|(prefix, _)| n.starts_with(prefix.as_str()))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, cc)| *cc)
}

/// `--vram`: a card name (`rtx4090`, `h100`, `m2-ultra-192g`), `NGB` with N a common card size
/// (that class's real total), any other decimal size (`50GB` = 50 × 10⁹), or an exact binary size
/// (`24GiB`, `24564MiB`). A bare number is refused: it could be GiB, GB or bytes.
pub fn parse_vram(s: &str) -> Result<Vram, InputError> {
    parse_card("--vram", s)
}

/// [`parse_vram`] for a flag of another name (`--vram-limit`), which its messages name.
pub fn parse_card(flag: &str, s: &str) -> Result<Vram, InputError> {
    let t = s.trim();
    if let Some(card) = find(t) {
        return Ok(Vram {
            bytes: card.bytes(),
            named: Some(t.to_string()),
            card: true,
            resolved: format!(
                "{t} → {}, {} MiB ({} bytes)",
                card.name,
                group(card.mib),
                group(card.bytes())
            ),
        });
    }
    if let Some(ram_gb) = apple_ram_gb(&canonical(t)) {
        let mib = apple_working_set_mib(ram_gb);
        return Ok(Vram {
            bytes: mib.saturating_mul(MIB),
            named: Some(t.to_string()),
            card: true,
            resolved: format!(
                "{t} → Apple silicon with {ram_gb} GB, Metal's GPU working set {} MiB ({} bytes; macOS 13–15's share, newer versions give more)",
                group(mib),
                group(mib.saturating_mul(MIB))
            ),
        });
    }
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(InputError::Usage(format!(
            "{flag} {t} has no unit; add a unit: write {t}GiB, {t}GB or a card name like rtx4090"
        )));
    }
    if looks_like_a_name(t) && t.parse::<Bytes>().is_err() {
        return Err(InputError::Usage(format!(
            "{flag} {t} is not a card llm-oom knows (close matches: {}) nor a memory size like 24GiB",
            close_matches(t, 4).join(", ")
        )));
    }
    let lower = t.to_ascii_lowercase();
    if let Some(num) = lower.strip_suffix("gb").map(str::trim) {
        if let Ok(n) = num.parse::<u64>() {
            let cards = if CLASSES.contains(&n) {
                class(n)
            } else {
                Vec::new()
            };
            if let (Some(small), Some(large)) = (cards.first(), cards.last()) {
                let range = if small.mib == large.mib {
                    format!("{} MiB", group(small.mib))
                } else {
                    format!(
                        "{}–{} MiB, {} to {}",
                        group(small.mib),
                        group(large.mib),
                        small.name,
                        large.name
                    )
                };
                return Ok(Vram {
                    named: None,
                    bytes: small.bytes(),
                    card: true,
                    resolved: format!(
                        "{t} → the {n} GB class ({range}): planned for its smallest, {}, {} MiB ({} bytes)",
                        small.name,
                        group(small.mib),
                        group(small.bytes())
                    ),
                });
            }
        }
    }
    let b = Bytes(crate::units::parse_size(flag, t)?);
    Ok(Vram {
        named: None,
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
        // `24XB` is a bad size, not 24 of a card named `B`.
        let v = match parse_vram(each) {
            Err(_) if n > 1 && each.trim().len() <= 3 => parse_vram(t)?,
            other => other?,
        };
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
        assert_eq!(v.bytes, 23_028 * MIB);
        assert!(v.resolved.contains("A10") && v.resolved.contains("23,028–24,576 MiB"));
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
            vec![23_028 * MIB, 23_028 * MIB, 24_576 * MIB]
        );
        for bad in ["0x24GiB", "65x24GiB", "2x", "24GiB,,24GiB", "2x24"] {
            assert!(parse_devices(bad).is_err(), "{bad}");
        }
    }

    fn mib(name: &str) -> u64 {
        parse_vram(name)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .bytes
            / MIB
    }

    #[test]
    fn short_ids_people_type_are_cards() {
        for (name, total) in [
            ("rtx3060", 12288),
            ("rtx3060ti", 8192),
            ("rtx3070", 8192),
            ("rtx3070ti", 8192),
            ("rtx3080", 10240),
            ("rtx3080-12g", 12288),
            ("rtx3080ti", 12288),
            ("rtx3090", 24576),
            ("rtx3090ti", 24564),
            ("rtx4060", 8188),
            ("rtx4060ti", 8188),
            ("rtx4060ti-16g", 16380),
            ("rtx4070", 12282),
            ("rtx4070ti", 12282),
            ("rtx4070ti-super", 16376),
            ("rtx4080", 16376),
            ("rtx4080-super", 16376),
            ("rtx4090", 24564),
            ("rtx5060ti", 16311),
            ("rtx5070", 12227),
            ("rtx5070ti", 16303),
            ("rtx5080", 16303),
            ("rtx5090", 32607),
            ("a10", 23028),
            ("a10g", 23028),
            ("l4", 23034),
            ("l40s", 46068),
            ("a100-40g", 40960),
            ("a100", 81920),
            ("h100", 81559),
            ("h200", 143771),
            ("mi300x", 196592),
            ("mi250x", 65520),
            ("h20", 97871),
            ("gh200", 97871),
            ("b200", 183359),
            ("gb200", 189471),
            ("b300", 275040),
            ("gb300", 284208),
            ("mi355x", 294896),
        ] {
            assert_eq!(mib(name), total, "{name}");
        }
    }

    #[test]
    fn case_spaces_and_hyphens_do_not_matter() {
        for name in ["RTX3060", "RTX 3060", "rtx-3060", "rtx_3060", " Rtx 3060 "] {
            assert_eq!(mib(name), 12288, "{name}");
        }
        assert_eq!(mib("RTX 4070 Ti SUPER"), 16376);
        assert_eq!(mib("rtx-4060-ti-16gb"), 16380);
        assert_eq!(mib("MI300X"), 196592);
    }

    #[test]
    fn what_nvidia_smi_prints_is_a_card() {
        assert_eq!(mib("NVIDIA GeForce RTX 4090"), 24564);
        assert_eq!(mib("NVIDIA GeForce RTX 3060"), 12288);
        assert_eq!(mib("NVIDIA GeForce RTX 5070 Ti"), 16303);
        assert_eq!(mib("NVIDIA A100-SXM4-80GB"), 81920);
        assert_eq!(mib("NVIDIA A100-SXM4-40GB"), 40960);
        assert_eq!(mib("NVIDIA H100 80GB HBM3"), 81559);
        assert_eq!(mib("NVIDIA A10G"), 23028);
        assert_eq!(mib("NVIDIA L4"), 23034);
        assert_eq!(mib("Tesla T4"), 15360);
        assert_eq!(mib("AMD Instinct MI300X"), 196592);
        assert_eq!(mib("NVIDIA B200"), 183359);
        assert_eq!(mib("NVIDIA GB200"), 189471);
        assert_eq!(mib("NVIDIA B300 SXM6 AC"), 275040);
        assert_eq!(mib("NVIDIA GB300"), 284208);
        assert_eq!(mib("NVIDIA H20"), 97871);
        assert_eq!(mib("NVIDIA GH200 480GB"), 97871);
        assert_eq!(mib("GH200 120GB"), 97871);
        assert_eq!(mib("AMD Instinct MI355X"), 294896);
    }

    #[test]
    fn blackwell_and_grace_hopper_names_have_their_compute_capability() {
        for (name, cc) in [
            ("NVIDIA GB200", (10, 0)),
            ("NVIDIA B200", (10, 0)),
            ("NVIDIA B300 SXM6 AC", (10, 3)),
            ("NVIDIA GB300", (10, 3)),
            ("NVIDIA GH200 480GB", (9, 0)),
            ("NVIDIA H20", (9, 0)),
            ("NVIDIA H200", (9, 0)),
            ("NVIDIA A100-SXM4-80GB", (8, 0)),
        ] {
            assert_eq!(compute_capability(name), Some(cc), "{name}");
        }
    }

    #[test]
    fn laptop_parts_are_their_own_cards() {
        for (name, total) in [
            ("rtx4090-laptop", 16376),
            ("RTX 4090 Laptop GPU", 16376),
            ("NVIDIA GeForce RTX 4060 Laptop GPU", 8188),
            ("rtx4070 laptop", 8188),
            ("RTX 4080 Laptop GPU", 12282),
            ("rtx4090 mobile", 16376),
        ] {
            assert_eq!(mib(name), total, "{name}");
        }
    }

    #[test]
    fn an_unknown_name_lists_close_matches() {
        let e = parse_vram("rtx4099").unwrap_err().to_string();
        assert!(
            e.contains("not a card llm-oom knows") && e.contains("rtx4090"),
            "{e}"
        );
        let e = parse_vram("mi300").unwrap_err().to_string();
        assert!(e.contains("mi300x"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn every_id_is_one_card() {
        let mut seen = std::collections::HashSet::new();
        for c in CARDS {
            for id in c.ids {
                assert!(seen.insert(canonical(id)), "{id} twice");
            }
        }
    }

    #[test]
    fn every_class_is_planned_for_its_smallest_card() {
        for gb in CLASSES {
            let cards = class(*gb);
            assert!(!cards.is_empty(), "{gb} GB has no card");
            let v = parse_vram(&format!("{gb}GB")).unwrap_or_else(|e| panic!("{gb}GB: {e}"));
            for c in &cards {
                assert!(
                    v.bytes <= c.bytes(),
                    "{gb}GB plans {} above {}",
                    v.bytes,
                    c.name
                );
                // within what decimal/binary and reserved memory explain
                let gib = c.mib as f64 / 1024.0;
                assert!(
                    (*gb as f64 * 0.86..*gb as f64 * 1.05).contains(&gib),
                    "{} in the {gb} GB class: {gib} GiB",
                    c.name
                );
            }
        }
        // The case: a plan for "24GB" must hold on an A10 and an L4.
        let v = parse_vram("24GB").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v.bytes, 23028 * MIB);
        assert!(v.resolved.contains("A10"), "{}", v.resolved);
        assert!(v.resolved.contains("24,576"), "{}", v.resolved);
    }
}
