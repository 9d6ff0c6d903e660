//! Small pure helpers on text that several floors share: cutting a string
//! on a character boundary (to a number of bytes, marked or not, or of
//! characters), the FNV-1a hash, base64 decoding, percent-encoding
//! one URL component, and showing what a value would hide ([`visible`]).
//! Nothing here allocates but [`label_of`] on a long name and [`visible`]
//! on a value with something to show.

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

/// `s` cut to at most `max` bytes on a character boundary ([`cut`]), and
/// marked with `…` where it was cut.
pub fn cut_marked(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return s.into();
    }
    format!("{}…", cut(s, max)).into()
}

/// `s` cut to at most `max_chars` characters, the last one `…` when cut
/// (a label on a page, whose room is counted in characters); no room is
/// an empty string.
pub fn cut_chars(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        None => s.to_owned(),
        Some(_) if max_chars == 0 => String::new(),
        Some(_) => {
            let end = s
                .char_indices()
                .nth(max_chars.saturating_sub(1))
                .map_or(s.len(), |(i, _)| i);
            format!("{}…", cut(s, end))
        }
    }
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

/// Whether `c` is written escaped wherever a holder or a name is shown
/// ([`visible`]): a control (C0 U+0000–U+001F, DEL, C1 U+0080–U+009F),
/// which a terminal obeys (ESC) or a display drops (NUL), or a
/// bidirectional formatting character (the marks U+200E, U+200F, U+061C,
/// the embeddings and overrides U+202A–U+202E, the isolates
/// U+2066–U+2069), which reorders the text around it as it is displayed:
/// `adm\u{202e}nimda` reads as `admadmin`.
pub fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Writes `c` as its escape: `\u{HEX}`, Rust's own form, lower-case hex
/// without leading zeros (NUL `\u{0}`, ESC `\u{1b}`, U+202E `\u{202e}`).
/// The one form, in every view; a value that holds those six characters
/// literally reads the same (it is shown, not hidden).
pub fn write_escape(out: &mut impl std::fmt::Write, c: char) -> std::fmt::Result {
    write!(out, "\\u{{{:x}}}", u32::from(c))
}

/// `s` with every [`hidden`] character written as its escape
/// ([`write_escape`]), so that what a holder or a name holds is what is
/// shown: the pages (their escaper), the Markdown report, the command
/// line's text. Borrowed when there is nothing to escape. The JSON API
/// gives values as they are.
pub fn visible(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(hidden) {
        return s.into();
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if hidden(c) {
            let _ = write_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// Percent-encodes everything but unreserved characters (RFC 3986): a
/// name becomes one URL path segment (`team/db` → `team%2Fdb`) or a query
/// value (a page's link, a Kubernetes API continue token).
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Standard base64 with padding (RFC 4648 section 4): HTTP Basic's
/// credentials, a WebDriver screenshot. `None` for anything else.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    fn sextet(c: u8) -> Option<u32> {
        Some(u32::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || chunk[..4 - pad].contains(&b'=') {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | sextet(c)?;
        }
        n <<= 6 * pad as u32;
        let three = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&three[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_characters_are_shown_escaped() {
        assert_eq!(
            visible("a\0b\u{1b}[31mc\u{202e}d"),
            "a\\u{0}b\\u{1b}[31mc\\u{202e}d"
        );
        for c in [
            '\n', '\t', '\u{7f}', '\u{85}', '\u{9f}', '\u{200e}', '\u{200f}', '\u{202a}',
            '\u{2066}', '\u{2069}', '\u{061c}',
        ] {
            assert!(hidden(c), "{c:?}");
            assert!(!visible(&c.to_string()).chars().any(hidden), "{c:?}");
        }
        for c in ['a', 'é', '→', '\u{a0}', '\u{2065}', '\u{202f}', '日'] {
            assert!(!hidden(c), "{c:?}");
        }
        assert!(matches!(
            visible("plain → text"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn cut_keeps_characters_whole() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "abc");
        assert_eq!(cut("aé", 2), "a");
        assert_eq!(cut("é", 0), "");
    }

    #[test]
    fn cut_marked_marks_only_what_it_cut() {
        assert_eq!(cut_marked("abc", 3), "abc");
        assert_eq!(cut_marked("abcd", 3), "abc…");
        assert_eq!(cut_marked("aé", 2), "a…");
    }

    #[test]
    fn cut_chars_counts_characters() {
        assert_eq!(cut_chars("abc", 3), "abc");
        assert_eq!(cut_chars("abcd", 3), "ab…");
        assert_eq!(cut_chars("äöüß", 2), "ä…");
        assert_eq!(cut_chars("ab", 0), "");
        assert_eq!(cut_chars("", 0), "");
    }

    #[test]
    fn fnv1a_matches_the_reference() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn base64_is_read_and_garbage_is_not() {
        assert_eq!(
            base64_decode("dXNlcjpzM2NyZXQ=").as_deref(),
            Some(&b"user:s3cret"[..])
        );
        assert_eq!(base64_decode("OnM=").as_deref(), Some(&b":s"[..]));
        assert_eq!(base64_decode("YWJj").as_deref(), Some(&b"abc"[..]));
        for bad in ["x", "dXNl=cjo", "====", "dXNlcjpz!!!="] {
            assert_eq!(base64_decode(bad), None, "{bad}");
        }
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
