//! The text helpers the pages share, all `crate::text`'s: cutting a label
//! to a number of characters, the FNV-1a hash; and [`Visible`], the pages'
//! escaper.

use std::fmt;

use askama::filters::{Escaper, Html};

pub use crate::text::cut_chars as truncate;
pub use crate::text::fnv1a;

/// The escaper of every HTML and SVG template (`askama.toml`): HTML's, and
/// each [`crate::text::hidden`] character written as its escape
/// (`\u{1b}`), so that no value (a holder, an election's name, anything a
/// template writes) reaches a page with a control or a bidirectional
/// override in it. `\n` and `\t` are kept: the pages' own hover texts are
/// laid out in lines, and a browser shows either as white space, never
/// hides or reorders text with it. `|safe` (the SVG, itself rendered
/// through this escaper) is not escaped again.
#[derive(Debug, Clone, Copy, Default)]
pub struct Visible;

impl Escaper for Visible {
    fn write_escaped_str<W: fmt::Write>(&self, mut dest: W, s: &str) -> fmt::Result {
        let mut start = 0;
        for (i, c) in s.char_indices() {
            if shown_escaped(c) {
                Html.write_escaped_str(&mut dest, &s[start..i])?;
                crate::text::write_escape(&mut dest, c)?;
                start = i + c.len_utf8();
            }
        }
        Html.write_escaped_str(dest, &s[start..])
    }
}

fn shown_escaped(c: char) -> bool {
    crate::text::hidden(c) && c != '\n' && c != '\t'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_shows_controls_and_bidi_escaped_and_html_escaped() {
        let mut out = String::new();
        Visible
            .write_escaped_str(&mut out, "<a>\0\u{1b}\u{202e}x\ny")
            .expect("written");
        assert_eq!(out, "&#60;a&#62;\\u{0}\\u{1b}\\u{202e}x\ny");
    }
}
