//! URL coding: election names as one path segment, query values in and
//! out, the pages' own query strings read into `(key, value)` pairs.

/// Percent-encodes everything but unreserved characters: an election name
/// becomes one path segment (`team/db` → `team%2Fdb`) or a query value.
pub use crate::text::encode_component;

/// The link to an election's timeline page.
pub fn election_href(name: &str) -> String {
    format!("/elections/{}", encode_component(name))
}

/// `application/x-www-form-urlencoded` value decoding (`+` is a space);
/// invalid escapes are kept as they are.
pub fn decode_component(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
                match hex.and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The pairs of a raw query string, values decoded and trimmed; pairs with
/// an empty value are left out (an empty form field means "not given").
pub(crate) fn query_pairs(raw: Option<&str>) -> impl Iterator<Item = (&str, String)> {
    raw.unwrap_or("").split('&').filter_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = decode_component(v).trim().to_owned();
        (!v.is_empty()).then_some((k, v))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_one_segment() {
        assert_eq!(election_href("team/db"), "/elections/team%2Fdb");
        assert_eq!(encode_component("a b<&>"), "a%20b%3C%26%3E");
        assert_eq!(decode_component("team%2Fdb+x%zz%4"), "team/db x%zz%4");
        assert_eq!(
            decode_component("2026-12-02T14%3A00%3A00Z"),
            "2026-12-02T14:00:00Z"
        );
    }

    #[test]
    fn query_pairs_skip_empty_values() {
        let pairs: Vec<_> = query_pairs(Some("a=%20x+&b=&c&d=1")).collect();
        assert_eq!(pairs, [("a", "x".to_owned()), ("d", "1".to_owned())]);
        assert_eq!(query_pairs(None).count(), 0);
    }
}
