//! A kubeconfig user's `exec` credential plugin (`client.authentication.
//! k8s.io/v1` and `v1beta1`): how managed clusters hand a person their
//! credentials (EKS `aws eks get-token`, GKE `gke-gcloud-auth-plugin`, AKS
//! and OIDC `kubelogin`). The plugin is run without a terminal, with
//! `KUBERNETES_EXEC_INFO` saying so, and prints an `ExecCredential`; its
//! token is kept until its `expirationTimestamp` (less a margin) and the
//! plugin run again then, or after the server answered 401 ([`Exec::
//! forget`]). Runs are one at a time; a run that takes longer than
//! [`RUN_TIMEOUT`] is killed.
//!
//! Not taken: a plugin that must ask the user (`interactiveMode: Always`:
//! serve has no terminal), and client certificates from the plugin (their
//! TLS would change per run): both refused with what to do instead.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Why the plugin gave no token, and what to do.
#[derive(Debug, thiserror::Error)]
#[error("the kubeconfig's exec plugin {command:?}: {reason}")]
pub struct ExecError {
    pub command: String,
    pub reason: String,
}

/// A plugin that has not answered by then is killed.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// A token is taken as expired this long before its expiry.
const MARGIN: Duration = Duration::from_secs(10);
/// Largest answer read from a plugin.
const MAX_OUTPUT: usize = 1 << 20;

/// The kubeconfig's `exec` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecConfig {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Option<Vec<EnvVar>>,
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub interactive_mode: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

#[derive(Deserialize)]
struct ExecCredential {
    status: Option<Status>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    token: Option<String>,
    expiration_timestamp: Option<String>,
    client_certificate_data: Option<String>,
}

/// A plugin and the token it last gave (with its expiry, µs since the
/// epoch; `None`: none said, kept until a 401).
#[derive(Debug)]
pub struct Exec {
    config: ExecConfig,
    /// The command as run: a relative path with a `/` is the kubeconfig
    /// folder's, as client-go takes it; a bare name is looked up in PATH.
    program: PathBuf,
    cached: tokio::sync::Mutex<Option<(String, Option<i64>)>>,
}

impl Exec {
    /// The plugin of a kubeconfig in folder `dir`; refused when it must
    /// ask the user.
    pub fn new(config: ExecConfig, dir: &Path) -> Result<Exec, ExecError> {
        if config.interactive_mode.as_deref() == Some("Always") {
            return Err(ExecError {
                command: config.command.clone(),
                reason: "its interactiveMode is Always, and serve has no terminal: log in \
                         beforehand so that the plugin answers without asking (e.g. a cached \
                         login), or give a token"
                    .to_owned(),
            });
        }
        let program = if config.command.contains('/') {
            dir.join(&config.command)
        } else {
            PathBuf::from(&config.command)
        };
        Ok(Exec {
            config,
            program,
            cached: tokio::sync::Mutex::new(None),
        })
    }

    /// The token: the one kept while it has not expired, else the
    /// plugin's new one.
    pub async fn token(&self) -> Result<String, ExecError> {
        let mut cached = self.cached.lock().await;
        let now_us = crate::events::now_ms() * 1000;
        let margin = i64::try_from(MARGIN.as_micros()).unwrap_or(i64::MAX);
        if let Some((token, expires)) = cached.as_ref() {
            if expires.is_none_or(|e| now_us < e.saturating_sub(margin)) {
                return Ok(token.clone());
            }
        }
        let (token, expires) = self.run().await?;
        *cached = Some((token.clone(), expires));
        Ok(token)
    }

    /// The server refused the token (401): the next request runs the
    /// plugin again.
    pub fn forget(&self) {
        if let Ok(mut cached) = self.cached.try_lock() {
            *cached = None;
        }
    }

    fn failed(&self, reason: String) -> ExecError {
        ExecError {
            command: self.config.command.clone(),
            reason,
        }
    }

    /// Runs the plugin once: its token and the token's expiry.
    async fn run(&self) -> Result<(String, Option<i64>), ExecError> {
        let version = self
            .config
            .api_version
            .clone()
            .unwrap_or_else(|| "client.authentication.k8s.io/v1".to_owned());
        let info = serde_json::json!({
            "apiVersion": version,
            "kind": "ExecCredential",
            "spec": {"interactive": false},
        });
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.config.args)
            .env("KUBERNETES_EXEC_INFO", info.to_string())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        for e in self.config.env.iter().flatten() {
            cmd.env(&e.name, &e.value);
        }
        let out = tokio::time::timeout(RUN_TIMEOUT, cmd.output())
            .await
            .map_err(|_| self.failed(format!("no answer within {RUN_TIMEOUT:?}")))?
            .map_err(|e| self.failed(format!("cannot run it: {e}")))?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = crate::text::cut_marked(said.trim(), 500);
            return Err(self.failed(format!("it exited with {}: {said}", out.status)));
        }
        if out.stdout.len() > MAX_OUTPUT {
            return Err(self.failed(format!("its answer is over {MAX_OUTPUT} bytes")));
        }
        self.credential(&out.stdout)
    }

    /// The token and expiry of an `ExecCredential`.
    fn credential(&self, stdout: &[u8]) -> Result<(String, Option<i64>), ExecError> {
        let cred: ExecCredential = serde_json::from_slice(stdout)
            .map_err(|e| self.failed(format!("its answer is no ExecCredential: {e}")))?;
        let status = cred
            .status
            .ok_or_else(|| self.failed("its ExecCredential has no status".to_owned()))?;
        let Some(token) = status.token.filter(|t| !t.is_empty()) else {
            let why = if status.client_certificate_data.is_some() {
                "it gives a client certificate, which tenure does not take from a plugin yet: \
                 give client-certificate and client-key in the kubeconfig instead"
            } else {
                "its ExecCredential has no token"
            };
            return Err(self.failed(why.to_owned()));
        };
        let expires = match status.expiration_timestamp.as_deref() {
            None | Some("") => None,
            Some(t) => Some(crate::layout::kubernetes::rfc3339_micros(t).ok_or_else(|| {
                self.failed(format!("its expirationTimestamp {t:?} is no RFC 3339 time"))
            })?),
        };
        Ok((token, expires))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(command: &str) -> Exec {
        let config = ExecConfig {
            command: command.to_owned(),
            args: Vec::new(),
            env: None,
            api_version: None,
            interactive_mode: None,
        };
        Exec::new(config, Path::new("/k")).unwrap()
    }

    #[test]
    fn a_credential_gives_its_token_and_expiry_or_says_what_is_wrong() {
        let e = exec("p");
        let ok = br#"{"kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"2030-01-01T00:00:00Z"}}"#;
        let (t, at) = e.credential(ok).unwrap();
        assert_eq!((t.as_str(), at), ("t", Some(1_893_456_000_000_000)));
        let none = br#"{"status":{"token":"t"}}"#;
        assert_eq!(e.credential(none).unwrap().1, None);
        for (bad, says) in [
            (
                &br#"{"status":{"clientCertificateData":"x"}}"#[..],
                "client certificate",
            ),
            (br#"{"status":{}}"#, "no token"),
            (br#"{}"#, "no status"),
            (br#"not json"#, "no ExecCredential"),
            (
                br#"{"status":{"token":"t","expirationTimestamp":"soon"}}"#,
                "RFC 3339",
            ),
        ] {
            let err = e.credential(bad).unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn a_relative_command_with_a_slash_is_the_kubeconfigs_folders() {
        assert_eq!(exec("bin/p").program, PathBuf::from("/k/bin/p"));
        assert_eq!(exec("aws").program, PathBuf::from("aws"));
    }
}
