//! What of tenure's environment the command it supervises does not get:
//! the credentials tenure reads. The command inherits every
//! other variable, so without this it would hold the etcd password (and
//! hand it to everything it starts, print it in a crash dump, send it to
//! a log collector).
//!
//! - gone: `TENURE_PASSWORD`, `ETCDCTL_PASSWORD`, `TENURE_PASSWORD_FILE`
//!   (the path to the secret: a command that needs etcd gets its own),
//!   `TENURE_API_TOKEN`, `TENURE_READ_TOKEN`, and `TENURE_DB` when its URL holds a password;
//! - kept without the password: `TENURE_USER` and `ETCDCTL_USER` given as
//!   `NAME:PASSWORD` become `NAME`;
//! - kept: every other variable (endpoints, prefix, TLS file paths, user
//!   names: none of them is a secret).

use std::ffi::OsString;

/// Variables whose value is a secret, or names the file that holds one.
const SECRETS: [&str; 5] = [
    "TENURE_PASSWORD",
    "ETCDCTL_PASSWORD",
    "TENURE_PASSWORD_FILE",
    "TENURE_API_TOKEN",
    "TENURE_READ_TOKEN",
];

/// Variables of the form `NAME[:PASSWORD]`.
const USERS: [&str; 2] = ["TENURE_USER", "ETCDCTL_USER"];

/// A history URL (`serve --db`): a PostgreSQL URL may carry a password.
const DB: &str = "TENURE_DB";

/// The changes to make to the environment (read with `lookup`) for the
/// command: `(name, None)` removes a variable, `(name, Some(value))` sets it.
pub fn scrub(lookup: impl Fn(&str) -> Option<OsString>) -> Vec<(String, Option<OsString>)> {
    let mut changes: Vec<(String, Option<OsString>)> = SECRETS
        .iter()
        .filter(|v| lookup(v).is_some())
        .map(|v| (v.to_string(), None))
        .collect();
    for var in USERS {
        let Some(value) = lookup(var) else { continue };
        // Not UTF-8: no user name tenure would take; drop it whole.
        let Some(value) = value.to_str() else {
            changes.push((var.to_owned(), None));
            continue;
        };
        if let Some((name, _password)) = value.split_once(':') {
            changes.push((var.to_owned(), Some(name.into())));
        }
    }
    if let Some(db) = lookup(DB) {
        let holds_password = db
            .to_str()
            .is_none_or(|url| crate::history::redact(url) != url || url.contains("password="));
        if holds_password {
            changes.push((DB.to_owned(), None));
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrubbed(env: &[(&str, &str)]) -> Vec<(String, Option<OsString>)> {
        scrub(|k| {
            env.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn every_credential_goes_and_the_user_names_stay() {
        let got = scrubbed(&[
            ("TENURE_PASSWORD", "pw"),
            ("ETCDCTL_PASSWORD", "pw"),
            ("TENURE_PASSWORD_FILE", "/run/secrets/pw"),
            ("TENURE_API_TOKEN", "tok"),
            ("TENURE_READ_TOKEN", "rtok"),
            ("TENURE_USER", "app:pa:ss"),
            ("ETCDCTL_USER", "app"),
            ("TENURE_DB", "postgres://app:secret@db/tenure"),
            ("TENURE_ENDPOINTS", "http://127.0.0.1:2379"),
        ]);
        let gone = |v: &str| got.contains(&(v.to_owned(), None));
        for v in SECRETS {
            assert!(gone(v), "{v}: {got:?}");
        }
        assert!(gone("TENURE_DB"), "{got:?}");
        assert!(got.contains(&("TENURE_USER".to_owned(), Some("app".into()))));
        assert!(!got
            .iter()
            .any(|(k, _)| k == "ETCDCTL_USER" || k == "TENURE_ENDPOINTS"));
    }

    #[test]
    fn a_database_without_a_password_stays() {
        for db in ["tenure.db", "postgres://app@db/tenure?sslmode=require"] {
            assert!(scrubbed(&[("TENURE_DB", db)]).is_empty(), "{db}");
        }
        let keyword = scrubbed(&[("TENURE_DB", "host=db user=app password=secret")]);
        assert_eq!(keyword, vec![("TENURE_DB".to_owned(), None)]);
    }
}
