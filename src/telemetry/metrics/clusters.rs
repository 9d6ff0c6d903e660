//! One exposition of several clusters' metrics: a serve with
//! `--cluster` keeps one [`Metrics`](super::Metrics) per cluster (each
//! updated only by its own watcher, so nothing in them changes) and merges
//! their texts here: each family once, its `# HELP`/`# TYPE` from the first
//! part that has it, and every sample of cluster `C` with `cluster="C"` as
//! its first label. The serve-wide part (the history writer's families)
//! adds only the families no cluster has, without the label.
//!
//! The texts are this crate's own renders: a family starts at its `# HELP`
//! line, a sample line starts with its metric name, which holds neither
//! `{` nor a space.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::exposition::push_label_value;
use super::families::{get, Id};

/// Families that are the process's, not a cluster's: taken from the
/// serve-wide part only.
const SERVE_WIDE: [&str; 1] = [get(Id::BuildInfo).name];

/// One family's lines: the header, then samples.
#[derive(Default)]
struct Block {
    header: Vec<String>,
    samples: String,
}

/// `parts` (cluster name, its render) and `serve` (the serve-wide render)
/// as one text, families in name order.
pub fn merge(parts: &[(&str, String)], serve: &str) -> String {
    let mut families: BTreeMap<String, Block> = BTreeMap::new();
    let size = parts
        .iter()
        .map(|(_, t)| t.len() + t.len() / 8)
        .sum::<usize>()
        + serve.len();
    for (cluster, text) in parts {
        let mut label = String::from("cluster=\"");
        push_label_value(&mut label, cluster);
        label.push('"');
        each_family(text, |name, header, samples| {
            if SERVE_WIDE.contains(&name) {
                return;
            }
            let block = families.entry(name.to_owned()).or_default();
            if block.header.is_empty() {
                block.header = header.iter().map(|l| (*l).to_owned()).collect();
            }
            for line in samples {
                push_labelled(&mut block.samples, line, &label);
            }
        });
    }
    each_family(serve, |name, header, samples| {
        if families.contains_key(name) {
            return;
        }
        let block = families.entry(name.to_owned()).or_default();
        block.header = header.iter().map(|l| (*l).to_owned()).collect();
        for line in samples {
            block.samples.push_str(line);
            block.samples.push('\n');
        }
    });
    let mut out = String::with_capacity(size);
    for block in families.values() {
        if block.samples.is_empty() {
            continue;
        }
        for h in &block.header {
            let _ = writeln!(out, "{h}");
        }
        out.push_str(&block.samples);
    }
    out
}

/// Calls `f(name, header lines, sample lines)` for each family of `text`.
fn each_family<'a>(text: &'a str, mut f: impl FnMut(&str, &[&'a str], &[&'a str])) {
    let mut name: Option<&str> = None;
    let mut header: Vec<&str> = Vec::new();
    let mut samples: Vec<&str> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            if let Some(n) = name {
                f(n, &header, &samples);
            }
            name = rest.split(' ').next();
            header = vec![line];
            samples.clear();
        } else if line.starts_with('#') {
            header.push(line);
        } else if !line.is_empty() {
            samples.push(line);
        }
    }
    if let Some(n) = name {
        f(n, &header, &samples);
    }
}

/// `line` with `label` first among its labels.
fn push_labelled(out: &mut String, line: &str, label: &str) {
    let cut = line.find(['{', ' ']).unwrap_or(line.len());
    let (name, rest) = line.split_at(cut);
    out.push_str(name);
    out.push('{');
    out.push_str(label);
    match rest.strip_prefix('{') {
        Some(labels) if labels.starts_with('}') => out.push_str(labels),
        Some(labels) => {
            out.push(',');
            out.push_str(labels);
        }
        None => {
            out.push('}');
            out.push_str(rest);
        }
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::merge;

    #[test]
    fn each_family_once_and_every_sample_labelled() {
        let a = "# HELP tenure_a A.\n# TYPE tenure_a gauge\ntenure_a{election=\"x{y\"} 1\n\
                 # HELP tenure_b B.\n# TYPE tenure_b counter\ntenure_b 2\n";
        let b = "# HELP tenure_a A.\n# TYPE tenure_a gauge\ntenure_a{election=\"z\"} 3\n\
                 # HELP tenure_build_info B.\n# TYPE tenure_build_info gauge\ntenure_build_info 1\n";
        let serve = "# HELP tenure_a A.\n# TYPE tenure_a gauge\ntenure_a 9\n\
                     # HELP tenure_build_info B.\n# TYPE tenure_build_info gauge\ntenure_build_info 1\n\
                     # HELP tenure_w W.\n# TYPE tenure_w gauge\ntenure_w 1\n";
        let out = merge(&[("p\"1", a.into()), ("q", b.into())], serve);
        assert_eq!(
            out,
            "# HELP tenure_a A.\n# TYPE tenure_a gauge\n\
             tenure_a{cluster=\"p\\\"1\",election=\"x{y\"} 1\n\
             tenure_a{cluster=\"q\",election=\"z\"} 3\n\
             # HELP tenure_b B.\n# TYPE tenure_b counter\ntenure_b{cluster=\"p\\\"1\"} 2\n\
             # HELP tenure_build_info B.\n# TYPE tenure_build_info gauge\ntenure_build_info 1\n\
             # HELP tenure_w W.\n# TYPE tenure_w gauge\ntenure_w 1\n"
        );
    }
}
