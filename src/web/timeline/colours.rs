//! Colours: a hue bucket per lane, from a hash of the holder, kept apart.

use super::*;
use crate::web::text::fnv1a;

/// Colour buckets for the lanes of one drawing: each holder's hash bucket
/// ([`hue_of`]) when those are already apart (at least `min(3, HUES/k)`
/// buckets for `k` lanes); otherwise spread evenly around the wheel in the
/// order of the hash buckets, starting at the first one, so that up to
/// [`MAX_LANES`] lanes stay at least two buckets (25°) apart.
pub(super) fn lane_hues(holders: &[&str]) -> Vec<u16> {
    let k = holders.len();
    let n = usize::from(HUES);
    let preferred: Vec<usize> = holders.iter().map(|h| usize::from(hue_of(h))).collect();
    if k == 0 {
        return Vec::new();
    }
    let want = (n / k).min(3);
    let distance = |a: usize, b: usize| {
        let d = a.abs_diff(b) % n;
        d.min(n - d)
    };
    let apart = preferred
        .iter()
        .enumerate()
        .all(|(i, a)| preferred[i + 1..].iter().all(|b| distance(*a, *b) >= want));
    if apart {
        return preferred.iter().map(|&h| h as u16).collect();
    }
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by_key(|&i| (preferred[i], i));
    let anchor = preferred[order[0]];
    let mut out = vec![0u16; k];
    for (j, &i) in order.iter().enumerate() {
        out[i] = ((anchor + j * n / k) % n) as u16;
    }
    out
}

/// The colour bucket a holder gets when nothing collides (the overview
/// uses it, so a holder keeps its colour there).
pub fn hue_of(holder: &str) -> u16 {
    (fnv1a(holder.as_bytes()) % u64::from(HUES)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_colours_come_from_the_hash_and_stay_apart() {
        // Holders whose hash buckets are apart keep them.
        let (a, b) = (
            "a",
            (0..)
                .map(|i| format!("h{i}"))
                .find(|h| {
                    let d = (i32::from(hue_of(h)) - i32::from(hue_of("a"))).rem_euclid(24);
                    d.min(24 - d) >= 3
                })
                .expect("a distant holder"),
        );
        assert_eq!(lane_hues(&[a, &b]), [hue_of(a), hue_of(&b)]);
        // Two holders in one bucket do not share a colour.
        let twin = (0..)
            .map(|i| format!("t{i}"))
            .find(|h| hue_of(h) == hue_of("a"))
            .expect("a twin");
        let hues = lane_hues(&["a", &twin]);
        assert_ne!(hues[0], hues[1]);
        assert!(hues.contains(&hue_of("a")));
        assert!(lane_hues(&[]).is_empty());
    }
}
