//! Units, summaries of repeated runs, and ratios to native.
//!
//! Convention (printed in every table header): "x native" is how many times
//! native's performance a target reaches, so 1.00 = native and higher is
//! always better. For rates that is target/native; for durations it is
//! native/target.

use serde::Serialize;

use crate::target::MessageCounts;

/// The unit a figure is reported in; it decides which way is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Unit {
    #[serde(rename = "MiB/s")]
    MibPerSec,
    #[serde(rename = "IOPS")]
    Iops,
    #[serde(rename = "ops/s")]
    OpsPerSec,
    #[serde(rename = "lookups/s")]
    LookupsPerSec,
    #[serde(rename = "entries/s")]
    EntriesPerSec,
    /// Files created and deleted (one create and one unlink each) per second.
    #[serde(rename = "files/s")]
    FilesPerSec,
    /// One figure over another of the same run (watched / unwatched), 1.00 = equal.
    #[serde(rename = "ratio")]
    Ratio,
    #[serde(rename = "s")]
    Seconds,
    #[serde(rename = "ms")]
    Milliseconds,
}

impl Unit {
    pub fn label(self) -> &'static str {
        match self {
            Self::MibPerSec => "MiB/s",
            Self::Iops => "IOPS",
            Self::OpsPerSec => "ops/s",
            Self::LookupsPerSec => "lookups/s",
            Self::EntriesPerSec => "entries/s",
            Self::FilesPerSec => "files/s",
            Self::Ratio => "ratio",
            Self::Seconds => "s",
            Self::Milliseconds => "ms",
        }
    }

    pub fn higher_is_better(self) -> bool {
        !matches!(self, Self::Seconds | Self::Milliseconds)
    }
}

/// Median, minimum and maximum of one figure over the runs that produced it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// How many runs produced the figure (failed runs are not counted).
    pub runs: usize,
}

impl Summary {
    /// `None` when no run produced a figure. NaNs are ignored: a figure is
    /// never NaN by construction, and one must not poison the median.
    pub fn of(values: &[f64]) -> Option<Self> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Self {
            median,
            min: v[0],
            max: v[n - 1],
            runs: n,
        })
    }
}

/// A target's figure as a multiple of native's, 1.0 = native, higher = better
/// whatever the unit. `None` when either figure is not positive and finite.
pub fn ratio_to_native(target: f64, native: f64, unit: Unit) -> Option<f64> {
    let usable = |x: f64| x.is_finite() && x > 0.0;
    if !usable(target) || !usable(native) {
        return None;
    }
    Some(if unit.higher_is_better() {
        target / native
    } else {
        native / target
    })
}

/// `after - before` for every message type that moved. Counters are monotonic;
/// if one went backwards (a restarted server) it counts as zero rather than
/// wrapping to a huge number.
pub fn counts_delta(before: &MessageCounts, after: &MessageCounts) -> MessageCounts {
    after
        .iter()
        .filter_map(|(name, &a)| {
            let b = before.get(name).copied().unwrap_or(0);
            let d = a.saturating_sub(b);
            (d > 0).then(|| (name.clone(), d))
        })
        .collect()
}

/// Per message type, the median over runs (a run without the type counts as 0).
pub fn median_counts(runs: &[&MessageCounts]) -> MessageCounts {
    let mut names: Vec<&String> = runs.iter().flat_map(|c| c.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let values: Vec<f64> = runs
                .iter()
                .map(|c| c.get(name).copied().unwrap_or(0) as f64)
                .collect();
            let median = Summary::of(&values).map_or(0.0, |s| s.median);
            (name.clone(), median.round() as u64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_max() {
        let s = Summary::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.runs), (2.0, 1.0, 3.0, 3));
        let s = Summary::of(&[4.0, 1.0, 2.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.5, 1.0, 4.0));
        let s = Summary::of(&[7.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (7.0, 7.0, 7.0));
        assert!(Summary::of(&[]).is_none());
        assert_eq!(Summary::of(&[f64::NAN, 5.0]).unwrap().median, 5.0);
    }

    #[test]
    fn ratio_is_always_higher_is_better() {
        // A rate half of native's is 0.5x native.
        assert_eq!(ratio_to_native(50.0, 100.0, Unit::MibPerSec), Some(0.5));
        // A build taking twice native's time is also 0.5x native.
        assert_eq!(ratio_to_native(20.0, 10.0, Unit::Seconds), Some(0.5));
        // Faster than native is above 1 either way.
        assert_eq!(ratio_to_native(200.0, 100.0, Unit::Iops), Some(2.0));
        assert_eq!(ratio_to_native(5.0, 10.0, Unit::Seconds), Some(2.0));
        assert_eq!(ratio_to_native(0.0, 10.0, Unit::Seconds), None);
        assert_eq!(ratio_to_native(1.0, f64::INFINITY, Unit::OpsPerSec), None);
    }

    #[test]
    fn deltas_and_median_counts() {
        let before: MessageCounts = [("Twalk".to_owned(), 10), ("Tread".to_owned(), 5)].into();
        let after: MessageCounts = [
            ("Twalk".to_owned(), 25),
            ("Tread".to_owned(), 5),
            ("Tclunk".to_owned(), 2),
        ]
        .into();
        let d = counts_delta(&before, &after);
        assert_eq!(
            d,
            [("Twalk".to_owned(), 15), ("Tclunk".to_owned(), 2)].into()
        );
        // Backwards counters (server restarted) do not wrap.
        assert!(counts_delta(&after, &before).is_empty());

        let a: MessageCounts = [("Twalk".to_owned(), 10)].into();
        let b: MessageCounts = [("Twalk".to_owned(), 30), ("Tread".to_owned(), 1)].into();
        let c: MessageCounts = [("Twalk".to_owned(), 20)].into();
        let m = median_counts(&[&a, &b, &c]);
        assert_eq!(
            m,
            [("Twalk".to_owned(), 20), ("Tread".to_owned(), 0)].into()
        );
    }
}
