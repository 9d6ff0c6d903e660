//! A list's JSON body cut into its pieces as it arrives: the list's
//! `metadata` and each object of its `items`, one at a time, so no page is
//! ever held whole. What one namespace's tenant writes (a Lease's
//! holderIdentity may pass 1 MB; etcd's request limit bounds it) can make
//! a page as large as it likes, never one piece larger than [`MAX_PIECE`]:
//! past it, a piece keeps its first [`HEAD`] bytes (its name and
//! resourceVersion come first: kube-apiserver writes `metadata` before
//! `spec`, and `name`, `namespace`, `resourceVersion` before anything a
//! writer chooses) and is said too big, never a reason to stop.
//!
//! The scan is JSON's own structure, nothing more: strings (with their
//! escapes) and the depth of `{`/`[`. Anything else at the top (`kind`,
//! `apiVersion`) is passed by. Cost: one pass over each byte; memory: the
//! piece being read.

/// The largest piece kept whole (one Lease: a few kB; etcd's default
/// request limit, 1.5 MiB, escaped in JSON, at most ~9 MiB).
pub(super) const MAX_PIECE: usize = 16 * 1024 * 1024;

/// What a piece larger than [`MAX_PIECE`] keeps: enough for its metadata's
/// name, namespace and resourceVersion.
pub(super) const HEAD: usize = 64 * 1024;

/// One piece of a list.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Piece {
    /// The list's `metadata` (its resourceVersion, its `continue`).
    Metadata(Vec<u8>),
    /// One object of `items`, whole.
    Item(Vec<u8>),
    /// One object of `items` longer than the limit: its first bytes and
    /// its length.
    TooBig { head: Vec<u8>, len: usize },
}

/// Which piece is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Metadata,
    Item,
}

/// A piece being read: from its opening bracket at `depth` to the closing
/// one that brings the depth back there.
#[derive(Debug)]
struct Capture {
    kind: Kind,
    depth: usize,
    bytes: Vec<u8>,
    len: usize,
}

impl Capture {
    fn push(&mut self, b: u8, max: usize) {
        self.len += 1;
        if self.len <= max {
            self.bytes.push(b);
        } else if self.len == max + 1 {
            self.bytes.truncate(HEAD.min(max));
            self.bytes.shrink_to_fit();
        }
    }

    fn piece(self, max: usize) -> Piece {
        match self.kind {
            // A list's own metadata is small; cut, it is unreadable.
            Kind::Metadata => Piece::Metadata(self.bytes),
            Kind::Item if self.len > max => Piece::TooBig {
                head: self.bytes,
                len: self.len,
            },
            Kind::Item => Piece::Item(self.bytes),
        }
    }
}

/// Reads a list's body chunk by chunk ([`Splitter::feed`]).
#[derive(Debug)]
pub(super) struct Splitter {
    max: usize,
    /// Open `{` and `[` outside strings.
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At depth 1, the next string names a member.
    want_key: bool,
    reading_key: bool,
    /// The last member's name at depth 1 (its first bytes).
    key: Vec<u8>,
    /// Within the `items` array.
    in_items: bool,
    capture: Option<Capture>,
    /// Anything but whitespace read at all.
    started: bool,
}

impl Splitter {
    pub(super) fn new() -> Self {
        Self::with_max(MAX_PIECE)
    }

    /// With another limit than [`MAX_PIECE`] (tests).
    fn with_max(max: usize) -> Self {
        Self {
            max,
            depth: 0,
            in_string: false,
            escaped: false,
            want_key: false,
            reading_key: false,
            key: Vec::new(),
            in_items: false,
            capture: None,
            started: false,
        }
    }

    /// The pieces `chunk` completes, in order.
    pub(super) fn feed(&mut self, chunk: &[u8], out: &mut Vec<Piece>) {
        for &b in chunk {
            if let Some(p) = self.byte(b) {
                out.push(p);
            }
        }
    }

    /// Whether the body read so far is one whole JSON value: a body cut
    /// short is no list.
    pub(super) fn whole(&self) -> bool {
        self.started && self.depth == 0 && !self.in_string
    }

    fn byte(&mut self, b: u8) -> Option<Piece> {
        if let Some(c) = &mut self.capture {
            c.push(b, self.max);
        }
        if self.in_string {
            self.in_string_byte(b);
            return None;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.want_key {
                    self.want_key = false;
                    self.reading_key = true;
                    self.key.clear();
                }
            }
            b'{' | b'[' => self.open(b),
            b'}' | b']' => return self.close(),
            b',' if self.depth == 1 => self.want_key = true,
            _ => {}
        }
        if !b.is_ascii_whitespace() {
            self.started = true;
        }
        None
    }

    fn in_string_byte(&mut self, b: u8) {
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
            self.reading_key = false;
        } else if self.reading_key && self.key.len() < 16 {
            self.key.push(b);
        }
    }

    fn open(&mut self, b: u8) {
        if self.capture.is_none() {
            let kind = match (self.depth, b) {
                (1, b'{') if self.key == b"metadata" => Some(Kind::Metadata),
                (2, b'{') if self.in_items => Some(Kind::Item),
                (1, b'[') if self.key == b"items" => {
                    self.in_items = true;
                    None
                }
                _ => None,
            };
            if let Some(kind) = kind {
                let mut c = Capture {
                    kind,
                    depth: self.depth,
                    bytes: Vec::new(),
                    len: 0,
                };
                c.push(b, self.max);
                self.capture = Some(c);
            }
        }
        self.depth += 1;
        if self.depth == 1 {
            self.want_key = true;
        }
    }

    fn close(&mut self) -> Option<Piece> {
        self.depth = self.depth.saturating_sub(1);
        if self.depth == 1 {
            self.in_items = false;
        }
        if self.capture.as_ref().is_some_and(|c| c.depth == self.depth) {
            return self.capture.take().map(|c| c.piece(self.max));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(body: &[u8], max: usize, chunk: usize) -> (Vec<Piece>, bool) {
        let mut s = Splitter::with_max(max);
        let mut out = Vec::new();
        for c in body.chunks(chunk) {
            s.feed(c, &mut out);
        }
        (out, s.whole())
    }

    #[test]
    fn a_list_is_its_metadata_and_its_items_one_at_a_time_whatever_the_chunks() {
        let body = br#"{"kind":"LeaseList","apiVersion":"coordination.k8s.io/v1","metadata":{"resourceVersion":"812","continue":"a}b"},"items":[{"metadata":{"name":"x]","namespace":"n"},"spec":{"holderIdentity":"a\"{["}} , {"metadata":{"name":"y"},"spec":{}}]}"#;
        for chunk in [1, 2, 7, body.len()] {
            let (pieces, whole) = split(body, 1000, chunk);
            assert!(whole);
            assert_eq!(
                pieces,
                [
                    Piece::Metadata(br#"{"resourceVersion":"812","continue":"a}b"}"#.to_vec()),
                    Piece::Item(
                        br#"{"metadata":{"name":"x]","namespace":"n"},"spec":{"holderIdentity":"a\"{["}}"#
                            .to_vec()
                    ),
                    Piece::Item(br#"{"metadata":{"name":"y"},"spec":{}}"#.to_vec()),
                ]
            );
        }
    }

    #[test]
    fn a_piece_past_the_limit_keeps_its_head_and_the_next_is_read_whole() {
        let long = "h".repeat(300);
        let body = format!(
            r#"{{"metadata":{{"resourceVersion":"9"}},"items":[{{"metadata":{{"name":"big"}},"spec":{{"holderIdentity":"{long}"}}}},{{"metadata":{{"name":"small"}}}}]}}"#
        );
        let (pieces, whole) = split(body.as_bytes(), 100, 13);
        assert!(whole);
        match &pieces[1] {
            Piece::TooBig { head, len } => {
                assert_eq!(*len, long.len() + 56);
                assert!(head.starts_with(br#"{"metadata":{"name":"big"}"#));
                assert!(head.len() <= 100);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            pieces[2],
            Piece::Item(br#"{"metadata":{"name":"small"}}"#.to_vec())
        );
    }

    #[test]
    fn a_body_cut_short_is_not_whole() {
        let (pieces, whole) = split(br#"{"metadata":{},"items":[{"metadata":{}"#, 100, 4);
        assert!(!whole);
        assert_eq!(pieces, [Piece::Metadata(b"{}".to_vec())]);
        assert!(!split(b"", 100, 4).1);
        assert!(!split(b"\"abc", 100, 4).1);
    }
}
