//! How often an answer at a given confidence was right on real logs it had not seen.

use super::*;

/// A confidence band and its record on real logs the rules had not seen (each held-out set's
/// first scoring; docs/explain.md has the table).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfidenceBand {
    pub band: &'static str,
    pub right: u32,
    pub of: u32,
    /// "right 250 of 339 times at this level on real logs it had not seen"
    pub text: String,
}

/// (lowest confidence in the band, its name, right, of) — measured on logs the rules had never
/// seen: the first scoring of each held-out set (tests/fixtures/logs/real-2026-12b, 52 logs:
/// 18/22, 12/15, 8/15; real-2026-12c, 50 logs: 16/25, 3/6, 7/19; real-2026-12d, 49 logs: 16/26,
/// 6/9, 7/14; real-2026-12e, 50 logs: 15/18, 8/11, 2/21; real-2026-12f, 50 logs: 23/30, 7/11,
/// 4/9; real-2026-12g, 49 logs: 17/21, 8/9, 5/19; real-2026-12h, 45 logs: 13/16, 4/8, 12/21;
/// real-2026-12i, 22 logs: 9/11, 0/2, 6/9; real-2026-12j, 44 logs: 17/19, 2/6, 10/19;
/// real-2026-12k, 40 logs: 12/15, 3/6, 11/19; real-2026-12l and -12m, 74 logs: 27/36, 4/11,
/// 19/27; real-2026-12n and -12o, 92 logs: 25/41, 8/12, 18/39; real-2026-12p and -12q, 49
/// logs: 17/29, 3/5, 8/15; real-2026-12r and -12s, 56 logs: 25/30, 8/13, 2/13; real-2026-12t
/// and -12u, 53 logs: 22/29, 5/6, 8/18). On the tune corpora every band scores higher (real:
/// 54/54, 22/24, 22/28), which is what fitting does; a user's log is one the rules have not
/// seen. Re-measure with the next held-out set.
pub(super) const CALIBRATION: &[(f64, &str, u32, u32)] = &[
    (0.8, "high (>= 0.8)", 272, 368),
    (0.6, "medium (0.6-0.8)", 81, 130),
    (0.0, "low (< 0.6)", 127, 277),
];

/// The band a confidence falls in, with its record.
pub fn confidence_band(confidence: f64) -> ConfidenceBand {
    let (_, band, right, of) = CALIBRATION
        .iter()
        .copied()
        .find(|b| confidence >= b.0)
        .unwrap_or((0.0, "low (< 0.6)", 0, 0));
    ConfidenceBand {
        band,
        right,
        of,
        text: format!("right {right} of {of} times at this level on real logs it had not seen"),
    }
}
