//! Medians, percentiles and the result rows the report is made of.

use serde::Serialize;

/// A summary of repeated samples. Percentiles are nearest-rank: with fewer
/// than 100 samples, p99 is the largest sample.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(samples: &[f64]) -> Summary {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        if v.is_empty() {
            return Summary {
                n: 0,
                median: f64::NAN,
                p99: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        Summary {
            n: v.len(),
            median: median_sorted(&v),
            p99: rank(&v, 0.99),
            min: v[0],
            max: v[v.len() - 1],
        }
    }

    /// For rates (higher is better), the "bad tail" is the low end: the
    /// 1st percentile. Rows of rates report it in the p99 column.
    pub fn of_rate(samples: &[f64]) -> Summary {
        let mut s = Summary::of(samples);
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        if !v.is_empty() {
            s.p99 = rank(&v, 0.01);
        }
        s
    }
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Nearest-rank percentile of sorted samples (`q` in 0..=1).
fn rank(v: &[f64], q: f64) -> f64 {
    let n = v.len();
    let k = ((q * n as f64).ceil() as usize).clamp(1, n);
    v[k - 1]
}

pub fn percentile(samples: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return f64::NAN;
    }
    rank(&v, q)
}

/// What a row is held to.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Target {
    /// The median ratio must be at least this.
    RatioAtLeast(f64),
    /// The median ratio must be at most this.
    RatioAtMost(f64),
    /// The median of tenure's figure must be at most this (in the row's unit).
    MedianAtMost(f64),
    /// The largest of tenure's figures must be at most this (in the row's unit).
    MaxAtMost(f64),
}

impl Target {
    pub fn describe(&self, unit: &str) -> String {
        match self {
            Target::RatioAtLeast(x) => format!("ratio ≥ {x}"),
            Target::RatioAtMost(x) => format!("ratio ≤ {x}"),
            Target::MedianAtMost(x) => format!("median ≤ {x} {unit}"),
            Target::MaxAtMost(x) => format!("max ≤ {x} {unit}"),
        }
    }
}

/// One line of the results table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The measurement's number in issue 6, with a letter for variants.
    pub id: String,
    pub what: String,
    pub unit: String,
    pub tenure: Summary,
    pub baseline_name: String,
    pub baseline: Option<Summary>,
    /// tenure ÷ baseline: per run when the runs are paired, else of the
    /// medians (and of the p99s).
    pub ratio: Option<Summary>,
    pub target: Option<Target>,
    pub met: Option<bool>,
    /// Rates: the tail column is the slow end (1st percentile).
    pub higher_is_better: bool,
    pub note: String,
}

impl Row {
    pub fn new(id: &str, what: &str, unit: &str, tenure: Summary) -> Row {
        Row {
            id: id.into(),
            what: what.into(),
            unit: unit.into(),
            tenure,
            baseline_name: String::new(),
            baseline: None,
            ratio: None,
            target: None,
            met: None,
            higher_is_better: false,
            note: String::new(),
        }
    }

    /// A row of rates (higher is better): summaries report the slow tail.
    pub fn rate(id: &str, what: &str, unit: &str, samples: &[f64]) -> Row {
        let mut r = Row::new(id, what, unit, Summary::of_rate(samples));
        r.higher_is_better = true;
        r
    }

    /// A row of times or sizes (lower is better).
    pub fn time(id: &str, what: &str, unit: &str, samples: &[f64]) -> Row {
        Row::new(id, what, unit, Summary::of(samples))
    }

    pub fn baseline_samples(self, name: &str, samples: &[f64]) -> Row {
        let s = if self.higher_is_better {
            Summary::of_rate(samples)
        } else {
            Summary::of(samples)
        };
        self.baseline(name, s)
    }

    pub fn baseline(mut self, name: &str, s: Summary) -> Row {
        self.baseline_name = name.into();
        self.baseline = Some(s);
        self
    }

    /// Ratios of paired runs (tenure_i ÷ baseline_i).
    pub fn paired_ratio(mut self, tenure: &[f64], baseline: &[f64]) -> Row {
        let r: Vec<f64> = tenure.iter().zip(baseline).map(|(t, b)| t / b).collect();
        self.ratio = Some(if self.higher_is_better {
            Summary::of_rate(&r)
        } else {
            Summary::of(&r)
        });
        self
    }

    /// Ratio of the medians (and of the p99s) of unpaired samples.
    pub fn median_ratio(mut self) -> Row {
        if let Some(b) = self.baseline {
            let t = self.tenure;
            self.ratio = Some(Summary {
                n: t.n.min(b.n),
                median: t.median / b.median,
                p99: t.p99 / b.p99,
                min: f64::NAN,
                max: f64::NAN,
            });
        }
        self
    }

    pub fn target(mut self, t: Target) -> Row {
        self.target = Some(t);
        self.met = Some(match t {
            Target::RatioAtLeast(x) => self.ratio.is_some_and(|r| r.median >= x),
            Target::RatioAtMost(x) => self.ratio.is_some_and(|r| r.median <= x),
            Target::MedianAtMost(x) => self.tenure.median <= x,
            Target::MaxAtMost(x) => self.tenure.max <= x,
        });
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }
}

/// A number with 3 significant digits, thousands unseparated.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let a = x.abs();
    if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 10.0 {
        format!("{x:.2}")
    } else if a >= 1.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.4}")
    }
}

pub fn fmt_pair(s: &Summary) -> String {
    format!("{} ({})", fmt_num(s.median), fmt_num(s.p99))
}

/// The results as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    out.push_str(
        "| # | measurement | unit | tenure median (p99) | baseline | baseline median (p99) | ratio median (p99) | target | met |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let baseline = r
            .baseline
            .map(|b| fmt_pair(&b))
            .unwrap_or_else(|| "–".into());
        let ratio = r.ratio.map(|b| fmt_pair(&b)).unwrap_or_else(|| "–".into());
        let target = r
            .target
            .map(|t| t.describe(&r.unit))
            .unwrap_or_else(|| "–".into());
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "–",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.id,
            r.what,
            r.unit,
            fmt_pair(&r.tenure),
            if r.baseline_name.is_empty() {
                "–"
            } else {
                &r.baseline_name
            },
            baseline,
            ratio,
            target,
            met
        ));
    }
    out
}
