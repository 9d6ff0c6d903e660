//! Small pure helpers on text that several floors share: cutting a string
//! to a number of bytes on a character boundary, and the FNV-1a hash.
//! Nothing here allocates but [`label_of`] on a long name.

/// `s` cut to at most `max` bytes, on a character boundary (never panics,
/// whatever `s` and `max`).
pub fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// 64-bit FNV-1a: stable across builds, platforms and replicas (a colour,
/// an asset URL, a label or a cursor must not change with the compiler),
/// usable in `const` items. Not a secret and not collision-resistant
/// against an adversary: a check, never an authenticator.
pub const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

/// `s` as a label of at most `max` bytes that stays its own: itself when it
/// fits, else its first bytes (cut on a character boundary), `~` and the 16
/// hex digits of its FNV-1a hash, so two long names that share a prefix get
/// two labels. `max` below 18 leaves no room for a prefix: the hash alone.
pub fn label_of(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return s.into();
    }
    let room = max.saturating_sub(17);
    format!("{}~{:016x}", cut(s, room), fnv1a(s.as_bytes())).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_characters_whole() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "abc");
        assert_eq!(cut("aé", 2), "a");
        assert_eq!(cut("é", 0), "");
    }

    #[test]
    fn fnv1a_matches_the_reference() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn long_labels_stay_distinct_and_short_ones_unchanged() {
        assert_eq!(label_of("team/db", 128), "team/db");
        let a = format!("{}a", "x".repeat(300));
        let b = format!("{}b", "x".repeat(300));
        let (la, lb) = (label_of(&a, 128), label_of(&b, 128));
        assert_ne!(la, lb);
        assert!(la.len() <= 128 && lb.len() <= 128, "{la}");
        assert!(la.starts_with("xxxx") && la.contains('~'), "{la}");
        let accents = "é".repeat(200);
        assert!(label_of(&accents, 128).len() <= 128);
    }
}
