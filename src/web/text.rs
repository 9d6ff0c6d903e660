//! Small pure helpers on text the pages share: cutting a label to a number
//! of characters (the FNV-1a hash is `crate::text`'s).

/// `s` cut to at most `max_chars` characters, the last one `…` when cut.
pub fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max_chars.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

pub use crate::text::fnv1a;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_counts_characters() {
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(truncate("abcd", 3), "ab…");
        assert_eq!(truncate("äöüß", 2), "ä…");
        assert_eq!(truncate("ab", 0), "…");
    }
}
