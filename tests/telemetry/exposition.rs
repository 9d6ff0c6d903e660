//! Exposition-format parsing, strict enough to catch escaping bugs.

use std::collections::BTreeMap;

/// One sample: name, labels (sorted), value.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses the text exposition format strictly enough to catch escaping bugs.
pub fn parse(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .unwrap_or_else(|| panic!("no value: {line:?}"));
        let name = line[..name_end].to_owned();
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices();
            let end = loop {
                let (i, c) = chars.next().unwrap_or_else(|| panic!("unclosed: {line:?}"));
                if c == '}' {
                    break i + 1;
                }
                if c == ',' {
                    continue;
                }
                let key_start = i;
                let mut key_end = i;
                for (j, c) in chars.by_ref() {
                    if c == '=' {
                        key_end = j;
                        break;
                    }
                }
                let key = r[key_start..key_end].to_owned();
                assert_eq!(chars.next().map(|x| x.1), Some('"'), "{line:?}");
                let mut value = String::new();
                loop {
                    let (_, c) = chars
                        .next()
                        .unwrap_or_else(|| panic!("bad value: {line:?}"));
                    match c {
                        '"' => break,
                        '\\' => match chars.next().map(|x| x.1) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => panic!("bad escape {other:?} in {line:?}"),
                        },
                        '\n' => panic!("raw newline in {line:?}"),
                        c => value.push(c),
                    }
                }
                labels.insert(key, value);
            };
            rest = &r[end..];
        }
        let value = rest.split_whitespace().next().expect("value");
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value {v:?}")),
        };
        out.push(Sample {
            name,
            labels,
            value,
        });
    }
    out
}

pub struct Exposition {
    pub text: String,
    pub samples: Vec<Sample>,
}

impl Exposition {
    pub fn new(text: String) -> Self {
        let samples = parse(&text);
        Self { text, samples }
    }

    /// The samples of `name` whose labels include `labels`.
    pub fn matching(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The value of the one sample of `name` with exactly `labels`.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<_> = self
            .matching(name, labels)
            .into_iter()
            .filter(|s| s.labels.len() == labels.len())
            .collect();
        assert!(found.len() <= 1, "{name} {labels:?}: {found:?}");
        found.first().map(|s| s.value)
    }

    #[track_caller]
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no sample {name} {labels:?} in\n{}", self.text))
    }

    /// Family name → HELP text.
    pub fn help(&self) -> BTreeMap<String, String> {
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix("# HELP "))
            .filter_map(|l| l.split_once(' '))
            .map(|(n, h)| (n.to_owned(), h.to_owned()))
            .collect()
    }

    pub fn types(&self) -> BTreeMap<String, String> {
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .map(|(n, h)| (n.to_owned(), h.to_owned()))
            .collect()
    }
}
