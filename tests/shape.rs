//! The code's shape that ARCHITECTURE.md promises ("Shape"), checked: no
//! function in `src/` is longer than [`MAX_FN_LINES`] lines, tests
//! included, measured by a parser (`syn`), from its `fn` to its closing
//! brace. A longer one is cut into named steps, by job, not allowed here.
//! [`NOT_YET_CUT`] lists those not cut yet with their length (none now):
//! the list only shrinks (one that grows, or is cut, fails until the list
//! says so).
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

/// The longest a function may be, from its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 80;

/// Functions over the cap not cut yet: (file under `src/`,
/// name, lines at most). Only shrinks.
const NOT_YET_CUT: &[(&str, &str, usize)] = &[];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Every function of `text` with a body (free, in an impl, a trait's
/// default, nested in another): (first line, name, lines long), from its
/// `fn` to its closing brace, as the parser sees it (a destructured
/// parameter's braces, strings and comments cannot end it early).
fn functions(text: &str) -> Vec<(usize, String, usize)> {
    let file = syn::parse_file(text).expect("a Rust file");
    let mut seen = Fns(Vec::new());
    syn::visit::visit_file(&mut seen, &file);
    seen.0
}

struct Fns(Vec<(usize, String, usize)>);

impl Fns {
    fn note(&mut self, sig: &syn::Signature, block: &syn::Block) {
        let first = sig.fn_token.span.start().line;
        let last = block.brace_token.span.close().end().line;
        self.0
            .push((first, sig.ident.to_string(), last - first + 1));
    }
}

impl<'a> syn::visit::Visit<'a> for Fns {
    fn visit_item_fn(&mut self, f: &'a syn::ItemFn) {
        self.note(&f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'a syn::ImplItemFn) {
        self.note(&f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'a syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.note(&f.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

#[test]
fn no_function_in_src_is_over_80_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut counted = 0;
    let mut long = Vec::new();
    let mut listed_and_seen = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        let rel = file
            .strip_prefix(&src)
            .unwrap_or(file)
            .display()
            .to_string();
        for (line, name, len) in functions(&text) {
            counted += 1;
            let listed = NOT_YET_CUT.iter().find(|(f, n, _)| *f == rel && *n == name);
            if let Some((_, _, most)) = listed {
                listed_and_seen.push((rel.clone(), name.clone()));
                if len > *most || len <= MAX_FN_LINES {
                    long.push(format!(
                        "src/{rel}:{line} {name} ({len} lines): listed in NOT_YET_CUT at \
                         {most}; shrink the list to what it is now"
                    ));
                }
            } else if len > MAX_FN_LINES {
                long.push(format!("src/{rel}:{line} {name} ({len} lines)"));
            }
        }
    }
    for (f, n, _) in NOT_YET_CUT {
        if !listed_and_seen.iter().any(|(rf, rn)| rf == f && rn == n) {
            long.push(format!("src/{f} {n}: listed in NOT_YET_CUT but gone"));
        }
    }
    assert!(
        counted > 500,
        "only {counted} functions found: the scan is broken"
    );
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (cut each into named steps):\n{}",
        long.join("\n")
    );
}

/// The parser sees a long function through braces in strings, raw
/// strings, comments, char literals and a destructured parameter, finds
/// one in an impl, a trait's default and one nested in another, and does
/// not take a declaration for one.
#[test]
fn the_length_check_measures_what_it_should() {
    let mut text = String::from(
        "trait T {\n    fn declared(&self);\n    fn default_body(&self) {}\n}\n\
         struct P { a: u8 }\n\
         impl P {\n    pub(crate) async fn long(P { a }: P) {\n    let s = \"}}}\";\n\
         let r = r#\"{\"a\":1}\"#;\n    // } a comment\n    /* } */\n    let c = '}';\n\
         let l: &'static str = \"\";\n    fn inner() {}\n",
    );
    for i in 0..80 {
        text.push_str(&format!("    let x{i} = {{ {i} }};\n"));
    }
    text.push_str("}\n}\nfn short() {}\n");
    let found = functions(&text);
    let names: Vec<(&str, usize)> = found.iter().map(|(_, n, l)| (n.as_str(), *l)).collect();
    assert_eq!(
        names,
        [
            ("default_body", 1),
            ("long", 89),
            ("inner", 1),
            ("short", 1)
        ]
    );
}
