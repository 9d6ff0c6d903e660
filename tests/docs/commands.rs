//! Every `tenure …` command the documents show parses with the binary's own
//! argument definitions, and every flag of a synopsis exists.

use clap::Parser;

use crate::links::{anchor, links};
use crate::{documents, rel};

/// Every `tenure …` invocation in a document, and whether it is a command line to run (a
/// line of a fenced block, after an optional `$ `, `sudo `, or `VAR=value` assignments;
/// continuation lines joined, `# comments` dropped) or a mention in prose (an inline code
/// span, often a synopsis such as `tenure campaign --queue`).
fn commands(text: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut pending = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            let l = line.trim();
            if let Some(stripped) = l.strip_suffix('\\') {
                pending.push_str(stripped);
                pending.push(' ');
                continue;
            }
            pending.push_str(l);
            let full = std::mem::take(&mut pending);
            if let Some(c) = invocation(&full) {
                out.push((c, true));
            }
        } else {
            let mut in_code = false;
            let mut span = String::new();
            for c in line.chars() {
                if c == '`' {
                    if in_code {
                        if let Some(c) = invocation(&span) {
                            out.push((c, false));
                        }
                        span.clear();
                    }
                    in_code = !in_code;
                } else if in_code {
                    span.push(c);
                }
            }
        }
    }
    out
}

fn invocation(line: &str) -> Option<String> {
    let line = line.split(" # ").next().unwrap_or(line).trim();
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.peek() {
        if *w == "$" || *w == "sudo" || (w.contains('=') && !w.starts_with('-')) {
            words.next();
        } else {
            break;
        }
    }
    let rest: Vec<&str> = words.collect();
    if rest.first() != Some(&"tenure") || rest.len() < 2 {
        return None;
    }
    Some(rest.join(" "))
}

/// Splits like a shell would for the simple commands docs show: quotes group words.
fn shell_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true
            }
            (None, c) if c.is_whitespace() => {
                if !cur.is_empty() || any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if !cur.is_empty() || any {
        out.push(cur);
    }
    out
}

/// The subcommand a command line names: the first word after `tenure` that is one
/// (global flags and their values may come first). `None`: not a tenure command line
/// (prose such as `tenure = { path = … }`, or the guard's internal `__guard`).
fn subcommand(cmd: &str) -> Option<String> {
    use clap::CommandFactory;
    let cli = tenure::cli::Cli::command();
    let words: Vec<&str> = cmd.split_whitespace().collect();
    let mut i = 1;
    while i < words.len() {
        let w = words[i];
        if let Some(flag) = w.strip_prefix("--") {
            let takes_value = cli
                .get_arguments()
                .find(|a| a.get_long() == Some(flag))
                .is_some_and(|a| a.get_action().takes_values());
            i += if takes_value { 2 } else { 1 };
            continue;
        }
        return cli.find_subcommand(w).map(|_| w.to_owned());
    }
    None
}

/// A usage line (`tenure campaign NAME [--id ID] … -- CMD ARGS…`) is a synopsis, not a
/// command: its placeholders are made concrete, its optional parts dropped.
fn concrete(cmd: &str) -> Option<String> {
    subcommand(cmd)?;
    if cmd.contains('…') || cmd.contains('[') || cmd.contains('|') || cmd.contains('<') {
        return None;
    }
    // Placeholders in upper case (OLD_TOKEN, PORT) stand for numbers in the tour.
    let words: Vec<String> = cmd
        .split(' ')
        .map(|w| {
            if w.len() > 1 && w.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                "1".to_owned()
            } else {
                w.to_owned()
            }
        })
        .collect();
    Some(words.join(" "))
}

#[test]
fn every_documented_tenure_command_parses() {
    let mut seen = 0;
    let mut failures = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read doc");
        for (cmd, runnable) in commands(&text) {
            if !runnable {
                continue;
            }
            let Some(c) = concrete(&cmd) else { continue };
            seen += 1;
            let argv = shell_words(&c);
            if let Err(e) = tenure::cli::Cli::try_parse_from(&argv) {
                use clap::error::ErrorKind;
                if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                    continue;
                }
                failures.push(format!("{}: `{c}`: {}", rel(&doc), e.kind()));
            }
        }
    }
    assert!(
        seen >= 5,
        "only {seen} commands found: is the extraction broken?"
    );
    assert!(
        failures.is_empty(),
        "commands in the docs that tenure does not accept:\n{}",
        failures.join("\n")
    );
}

/// The synopses (`tenure campaign NAME [--id ID] …`) name only flags the subcommand has.
#[test]
fn every_flag_in_a_synopsis_exists() {
    use clap::CommandFactory;
    let cli = tenure::cli::Cli::command();
    let mut failures = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read doc");
        for (cmd, _) in commands(&text) {
            let words: Vec<&str> = cmd.split_whitespace().collect();
            let Some(sub) = subcommand(&cmd) else {
                if words.get(1).is_some_and(|w| w.starts_with("--")) {
                    failures.push(format!("{}: `{cmd}`: no subcommand", rel(&doc)));
                }
                continue;
            };
            let Some(sc) = cli.find_subcommand(&sub) else {
                continue;
            };
            for w in &words[1..] {
                if *w == "--" {
                    break;
                }
                let flag = w
                    .trim_start_matches(['[', '('])
                    .trim_end_matches([']', ')', ',']);
                let Some(long) = flag.strip_prefix("--") else {
                    continue;
                };
                let long = long.split('=').next().unwrap_or(long);
                if long.is_empty() || !long.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                    continue;
                }
                let known = sc.get_arguments().any(|a| a.get_long() == Some(long))
                    || cli.get_arguments().any(|a| a.get_long() == Some(long))
                    || long == "help"
                    || long == "version";
                if !known {
                    failures.push(format!("{}: `{cmd}`: no flag --{long}", rel(&doc)));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "flags in the docs that do not exist:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_extractors_find_what_they_should() {
    let md = "a [x](docs/a.md) `tenure leader x` and\n```sh\n$ sudo tenure --prefix p/ \\\n  serve --listen 1:2\nFOO=1 tenure fence a b --token 3 # refused\n```\n";
    assert_eq!(links(md), vec!["docs/a.md"]);
    assert_eq!(
        commands(md),
        vec![
            ("tenure leader x".to_owned(), false),
            ("tenure --prefix p/ serve --listen 1:2".to_owned(), true),
            ("tenure fence a b --token 3".to_owned(), true)
        ]
    );
    assert_eq!(
        shell_words("tenure campaign a -- sh -c 'echo \"$X\"; sleep 1'"),
        vec![
            "tenure",
            "campaign",
            "a",
            "--",
            "sh",
            "-c",
            "echo \"$X\"; sleep 1"
        ]
    );
    assert_eq!(
        anchor("The holder's safety promise (`tenure campaign`)"),
        "the-holders-safety-promise-tenure-campaign"
    );
}
