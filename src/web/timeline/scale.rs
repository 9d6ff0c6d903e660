//! Time to x, and a term clipped to the window: what the layout core and
//! its parts (bars, shades, ticks) share, in a file of its own so that
//! none of them imports another's.

use crate::history::TermRow;

/// Maps time to x.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scale {
    pub(super) from: i64,
    pub(super) to: i64,
    pub(super) left: f64,
    pub(super) right: f64,
}

impl Scale {
    pub(super) fn x(&self, t: i64) -> f64 {
        let t = t.clamp(self.from, self.to);
        let span = (self.to - self.from).max(1) as f64;
        self.left + (t - self.from) as f64 / span * (self.right - self.left)
    }
}

/// A term clipped to the window.
pub(super) struct Visible<'a> {
    pub(super) term: &'a TermRow,
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) open: bool,
}
