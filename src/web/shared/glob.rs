//! The election-name glob of `/timeline`, the report, the overview and the
//! scrape filter.
//!
//! A glob is compiled once ([`Glob::new`]) into the literal runs between
//! its `*`s; a name is matched by placing each run at its leftmost fit
//! (the first anchored at the start, the last at the end), which is
//! correct for `*` and never backtracks. Cost per name: the name's length
//! times the longest run in the worst case (a run of `?`s or a repeated
//! letter), the name's length on ordinary globs; no allocation.

/// `*` matches any run of bytes (slashes included), `?` one character;
/// everything else itself.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    Glob::new(pattern).matches(name)
}

/// A compiled glob.
#[derive(Debug, Clone)]
pub struct Glob {
    /// The runs between `*`s, each as characters.
    runs: Vec<Vec<char>>,
    /// Whether the pattern starts (ends) with `*`: the first (last) run
    /// may then float.
    open_start: bool,
    open_end: bool,
}

impl Glob {
    pub fn new(pattern: &str) -> Glob {
        Glob {
            runs: pattern.split('*').map(|r| r.chars().collect()).collect(),
            open_start: pattern.starts_with('*'),
            open_end: pattern.ends_with('*'),
        }
    }

    pub fn matches(&self, name: &str) -> bool {
        let n = self.runs.len();
        let mut rest = name;
        for (i, run) in self.runs.iter().enumerate() {
            let (first, last) = (i == 0, i == n - 1);
            if first && !self.open_start {
                let Some(after) = match_at(run, rest) else {
                    return false;
                };
                rest = after;
                if last {
                    return rest.is_empty();
                }
                continue;
            }
            if last && !self.open_end {
                return ends_with(run, rest);
            }
            match find(run, rest) {
                Some(after) => rest = after,
                None => return false,
            }
        }
        true
    }
}

/// `run` at the start of `s`: what follows it.
fn match_at<'a>(run: &[char], s: &'a str) -> Option<&'a str> {
    let mut chars = s.char_indices();
    for &p in run {
        let (_, c) = chars.next()?;
        if p != '?' && p != c {
            return None;
        }
    }
    Some(chars.as_str())
}

/// The leftmost place of `run` in `s`: what follows it.
fn find<'a>(run: &[char], s: &'a str) -> Option<&'a str> {
    let mut at = s;
    loop {
        if let Some(after) = match_at(run, at) {
            return Some(after);
        }
        let mut chars = at.chars();
        chars.next()?;
        at = chars.as_str();
    }
}

/// Whether `s` ends with `run` (`?` one character).
fn ends_with(run: &[char], s: &str) -> bool {
    let mut chars = s.chars().rev();
    for &p in run.iter().rev() {
        match chars.next() {
            Some(c) if p == '?' || p == c => {}
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_as_documented() {
        let cases = [
            ("*", "a/b", true),
            ("*", "", true),
            ("", "", true),
            ("", "a", false),
            ("svc-*", "svc-1", true),
            ("svc-*", "db-1", false),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("?", "é", true),
            ("*/leader", "x/y/leader", true),
            ("a*b", "acbd", false),
            ("a*b*", "acbd", true),
            ("a*b*c", "abcbc", true),
            ("*ab", "aab", true),
            ("**", "x", true),
            ("a*a", "a", false),
            ("*a*", "bab", true),
            ("team/*/db", "team/x/y/db", true),
            ("team/*/db", "team/x/y/dbz", false),
        ];
        for (p, n, want) in cases {
            assert_eq!(glob_match(p, n), want, "{p:?} on {n:?}");
        }
    }

    #[test]
    fn a_pathological_glob_stays_cheap() {
        let pattern = format!("*{}b", "a".repeat(250));
        let name = "a".repeat(511);
        // The last run is anchored at the end: one comparison per character.
        assert!(!glob_match(&pattern, &name));
        let middle = format!("*{}b*", "a".repeat(250));
        assert!(!glob_match(&middle, &name));
    }
}
