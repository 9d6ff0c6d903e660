//! Where the Kubernetes API is and who tenure is there: a kubeconfig file
//! (YAML or JSON, kubectl's common fields) or the pod's own service
//! account (`--in-cluster`). What this does not support is refused with
//! what to do, never half-read:
//!
//! - the current context's cluster `server` (https only),
//!   `certificate-authority` or `certificate-authority-data` (else the
//!   system's roots), `tls-server-name`; `insecure-skip-tls-verify` is
//!   refused (a Lease history read from an unverified server proves
//!   nothing);
//! - the user's `token`, `tokenFile` (read again for every request: a
//!   projected token rotates; with both, the file's token wins and
//!   `token` serves only while the file was never read, as client-go
//!   does), `client-certificate(-data)` with
//!   `client-key(-data)`, an `exec` plugin's token (`exec.rs`);
//!   `auth-provider` plugins and basic auth are refused: give a token, a
//!   certificate or an exec plugin instead.
//!
//! Relative paths are relative to the kubeconfig's directory, as kubectl
//! reads them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::Deserialize;

use crate::task::Locked;

/// The service account's files in a pod.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What cannot be read from a kubeconfig or the pod's service account.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a kubeconfig (YAML or JSON): {reason}")]
    Parse { path: String, reason: String },
    #[error(
        "{path} names no context to use: set current-context (kubectl config use-context NAME)"
    )]
    NoContext { path: String },
    #[error("{path} has no {what} named {name:?} (the current context names it)")]
    Missing {
        path: String,
        what: &'static str,
        name: String,
    },
    #[error(
        "the kubeconfig's cluster server {server:?} is not an https:// URL \
         (https://HOST[:PORT]): tenure reads the API over TLS only"
    )]
    Server { server: String },
    #[error(
        "the kubeconfig's cluster sets insecure-skip-tls-verify: tenure does not read Leases \
         from a server it cannot verify; give certificate-authority (a file) or \
         certificate-authority-data (base64 PEM) instead"
    )]
    Insecure,
    #[error(
        "the kubeconfig's user authenticates with {what}, which tenure does not run; give it a \
         token (token or tokenFile, e.g. `kubectl create token SERVICEACCOUNT`), a client \
         certificate (client-certificate and client-key) or an exec plugin (the provider's own, \
         e.g. gke-gcloud-auth-plugin, `kubelogin convert-kubeconfig`) instead"
    )]
    Plugin { what: &'static str },
    #[error(transparent)]
    Exec(#[from] super::exec::ExecError),
    #[error("{what}: {reason}")]
    Tls { what: String, reason: String },
    #[error(
        "--in-cluster: {what} is not set or not readable; it is given to a pod by Kubernetes \
         (a ServiceAccount with automountServiceAccountToken, or a projected token volume at \
         {SERVICE_ACCOUNT_DIR})"
    )]
    NotInCluster { what: String },
}

/// How tenure proves who it is to the API server.
#[derive(Debug, Clone)]
pub enum Credential {
    /// None (a client certificate in the TLS config, or anonymous).
    None,
    Token(String),
    /// Read for each request (a projected service-account token rotates).
    /// As client-go reads a kubeconfig user with both `token` and
    /// `tokenFile`: the file's token wins; when the file cannot be read or
    /// is empty, its last token read stands, else `token`.
    TokenFile {
        path: PathBuf,
        token: Option<String>,
        last: Arc<std::sync::Mutex<Option<String>>>,
    },
    /// An `exec` plugin's token, run again as it expires or after a 401.
    Exec(Arc<super::exec::Exec>),
}

impl Credential {
    fn token_file(path: PathBuf, token: Option<String>) -> Self {
        Self::TokenFile {
            path,
            token,
            last: Arc::default(),
        }
    }
}

/// One API server: where, its TLS, and the credential.
#[derive(Clone)]
pub struct ApiConfig {
    /// `HOST[:PORT]` as written in the server URL (the HTTP Host).
    pub authority: String,
    pub host: String,
    pub port: u16,
    /// A path the server URL carries (a proxy in front of the API), no
    /// trailing `/`.
    pub base_path: String,
    pub server_name: ServerName<'static>,
    pub tls: Arc<rustls::ClientConfig>,
    pub credential: Credential,
}

impl std::fmt::Debug for ApiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiConfig")
            .field("server", &self.authority)
            .field("base_path", &self.base_path)
            .finish_non_exhaustive()
    }
}

impl ApiConfig {
    /// The current context of the kubeconfig at `path`.
    pub fn from_kubeconfig(path: &Path) -> Result<Self, ConfigError> {
        Self::from_kubeconfig_context(path, None)
    }

    /// The context `context` of the kubeconfig at `path` (`None`: its
    /// current context).
    pub fn from_kubeconfig_context(
        path: &Path,
        context: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: shown.clone(),
            source,
        })?;
        let kc: Kubeconfig = serde_yaml_ng::from_str(&text).map_err(|e| ConfigError::Parse {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let (cluster, user) = kc.current(&shown, context)?;
        if cluster.insecure_skip_tls_verify {
            return Err(ConfigError::Insecure);
        }
        if user.auth_provider.is_some() {
            return Err(ConfigError::Plugin {
                what: "an auth-provider plugin",
            });
        }
        if user.username.is_some() || user.password.is_some() {
            return Err(ConfigError::Plugin {
                what: "a username and password",
            });
        }
        let ca = bytes_of(
            "certificate-authority",
            cluster.certificate_authority.as_deref(),
            cluster.certificate_authority_data.as_deref(),
            dir,
        )?;
        let cert = bytes_of(
            "client-certificate",
            user.client_certificate.as_deref(),
            user.client_certificate_data.as_deref(),
            dir,
        )?;
        let key = bytes_of(
            "client-key",
            user.client_key.as_deref(),
            user.client_key_data.as_deref(),
            dir,
        )?;
        let token = user.token.clone().filter(|t| !t.is_empty());
        let credential = match (token, &user.token_file, user.exec) {
            (token, Some(f), _) => Credential::token_file(dir.join(f), token),
            (Some(t), None, _) => Credential::Token(t),
            // As client-go: a token given beside the plugin wins.
            (None, None, Some(exec)) => {
                Credential::Exec(Arc::new(super::exec::Exec::new(exec, dir)?))
            }
            (None, None, None) => Credential::None,
        };
        let identity = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => {
                return Err(ConfigError::Tls {
                    what: "the kubeconfig's user".into(),
                    reason: "client-certificate and client-key go together: give both".into(),
                })
            }
        };
        let server = Server::parse(&cluster.server)?;
        let name = cluster
            .tls_server_name
            .unwrap_or_else(|| server.host.clone());
        Self::new(server, &name, ca.as_deref(), identity, credential)
    }

    /// The pod's own service account: its token (read for each request),
    /// its CA, and the API at `KUBERNETES_SERVICE_HOST`:`_PORT`.
    pub fn in_cluster() -> Result<Self, ConfigError> {
        Self::in_cluster_at(
            std::env::var("KUBERNETES_SERVICE_HOST").ok(),
            std::env::var("KUBERNETES_SERVICE_PORT").ok(),
            Path::new(SERVICE_ACCOUNT_DIR),
        )
    }

    fn in_cluster_at(
        host: Option<String>,
        port: Option<String>,
        dir: &Path,
    ) -> Result<Self, ConfigError> {
        let missing = |what: &str| ConfigError::NotInCluster { what: what.into() };
        let host = host
            .filter(|h| !h.is_empty())
            .ok_or_else(|| missing("KUBERNETES_SERVICE_HOST"))?;
        let port = port.unwrap_or_else(|| "443".into());
        let token = dir.join("token");
        if !token.is_file() {
            return Err(missing(&token.display().to_string()));
        }
        let ca_path = dir.join("ca.crt");
        let ca = std::fs::read(&ca_path).map_err(|_| missing(&ca_path.display().to_string()))?;
        // An IPv6 address is bracketed in a URL.
        let shown = if host.contains(':') {
            format!("https://[{host}]:{port}")
        } else {
            format!("https://{host}:{port}")
        };
        let server = Server::parse(&shown)?;
        let name = server.host.clone();
        Self::new(
            server,
            &name,
            Some(&ca),
            None,
            Credential::token_file(token, None),
        )
    }

    fn new(
        server: Server,
        name: &str,
        ca: Option<&[u8]>,
        identity: Option<(Vec<u8>, Vec<u8>)>,
        credential: Credential,
    ) -> Result<Self, ConfigError> {
        let server_name = ServerName::try_from(name.to_owned()).map_err(|e| ConfigError::Tls {
            what: format!("the server name {name:?}"),
            reason: e.to_string(),
        })?;
        Ok(Self {
            tls: Arc::new(tls_config(ca, identity)?),
            authority: server.authority,
            host: server.host,
            port: server.port,
            base_path: server.path,
            server_name,
            credential,
        })
    }

    /// `Authorization`'s value for a request, when there is a token: an
    /// exec plugin's too (run when its token expired).
    pub async fn authorization(&self) -> Result<Option<String>, ConfigError> {
        match &self.credential {
            Credential::Exec(e) => Ok(Some(format!("Bearer {}", e.token().await?))),
            _ => self.bearer(),
        }
    }

    /// The server refused the credential (401): an exec plugin's token is
    /// not used again.
    pub fn refused(&self) {
        if let Credential::Exec(e) = &self.credential {
            e.forget();
        }
    }

    /// `Authorization`'s value, when there is a static or file token (an
    /// exec plugin's is [`ApiConfig::authorization`]'s).
    pub fn bearer(&self) -> Result<Option<String>, ConfigError> {
        match &self.credential {
            Credential::None | Credential::Exec(_) => Ok(None),
            Credential::Token(t) => Ok(Some(format!("Bearer {t}"))),
            Credential::TokenFile { path, token, last } => {
                let read = std::fs::read_to_string(path).and_then(|t| match t.trim() {
                    "" => Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "the token file is empty: write the token into it",
                    )),
                    t => Ok(t.to_owned()),
                });
                let mut last = last.locked();
                let t = match read {
                    Ok(t) => last.insert(t).clone(),
                    Err(source) => match last.as_ref().or(token.as_ref()) {
                        Some(t) => t.clone(),
                        None => {
                            return Err(ConfigError::Read {
                                path: path.display().to_string(),
                                source,
                            })
                        }
                    },
                };
                Ok(Some(format!("Bearer {t}")))
            }
        }
    }
}

/// The parts of an `https://HOST[:PORT][/PATH]` server URL.
#[derive(Debug, PartialEq, Eq)]
struct Server {
    authority: String,
    host: String,
    port: u16,
    path: String,
}

impl Server {
    fn parse(url: &str) -> Result<Self, ConfigError> {
        let bad = || ConfigError::Server {
            server: url.to_owned(),
        };
        let rest = url.strip_prefix("https://").ok_or_else(bad)?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(bad)?;
            (h, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let port = match port {
            Some(p) => p.parse().map_err(|_| bad())?,
            None => 443,
        };
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Self {
            authority: authority.to_owned(),
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }
}

/// The file's bytes, or the base64 data's (the data wins, as kubectl).
fn bytes_of(
    what: &str,
    file: Option<&str>,
    data: Option<&str>,
    dir: &Path,
) -> Result<Option<Vec<u8>>, ConfigError> {
    if let Some(d) = data.filter(|d| !d.is_empty()) {
        let clean: String = d.chars().filter(|c| !c.is_whitespace()).collect();
        return crate::text::base64_decode(&clean)
            .map(Some)
            .ok_or_else(|| ConfigError::Tls {
                what: format!("{what}-data"),
                reason: "not base64".into(),
            });
    }
    match file.filter(|f| !f.is_empty()) {
        None => Ok(None),
        Some(f) => {
            let path = dir.join(f);
            std::fs::read(&path)
                .map(Some)
                .map_err(|source| ConfigError::Read {
                    path: path.display().to_string(),
                    source,
                })
        }
    }
}

/// rustls with ring (tonic's provider): the CA given, else the system's
/// roots; a client certificate when given.
fn tls_config(
    ca: Option<&[u8]>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
) -> Result<rustls::ClientConfig, ConfigError> {
    let tls = |what: &str, reason: String| ConfigError::Tls {
        what: what.into(),
        reason,
    };
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| tls("certificate-authority", e.to_string()))?;
                roots
                    .add(cert)
                    .map_err(|e| tls("certificate-authority", e.to_string()))?;
            }
            if roots.is_empty() {
                return Err(tls("certificate-authority", "no PEM certificate".into()));
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls("TLS", e.to_string()))?
        .with_root_certificates(roots);
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| tls("client-certificate", e.to_string()))?;
            let key = PrivateKeyDer::from_pem_slice(&key)
                .map_err(|e| tls("client-key", e.to_string()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls("client-certificate", e.to_string()))
        }
    }
}

#[derive(Deserialize)]
struct Kubeconfig {
    #[serde(rename = "current-context", default)]
    current_context: Option<String>,
    #[serde(default)]
    clusters: Vec<NamedCluster>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: String,
    cluster: Cluster,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    certificate_authority: Option<String>,
    certificate_authority_data: Option<String>,
    tls_server_name: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: User,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct User {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<String>,
    client_certificate: Option<String>,
    client_certificate_data: Option<String>,
    client_key: Option<String>,
    client_key_data: Option<String>,
    exec: Option<super::exec::ExecConfig>,
    auth_provider: Option<serde_yaml_ng::Value>,
    username: Option<String>,
    password: Option<String>,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Deserialize)]
struct Context {
    cluster: String,
    #[serde(default)]
    user: String,
}

impl Kubeconfig {
    fn current(self, path: &str, context: Option<&str>) -> Result<(Cluster, User), ConfigError> {
        let missing = |what, name: &str| ConfigError::Missing {
            path: path.to_owned(),
            what,
            name: name.to_owned(),
        };
        let name = context
            .map(str::to_owned)
            .or(self.current_context)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| ConfigError::NoContext {
                path: path.to_owned(),
            })?;
        let ctx = self
            .contexts
            .into_iter()
            .find(|c| c.name == name)
            .ok_or_else(|| missing("context", &name))?
            .context;
        let cluster = self
            .clusters
            .into_iter()
            .find(|c| c.name == ctx.cluster)
            .ok_or_else(|| missing("cluster", &ctx.cluster))?
            .cluster;
        let user = match ctx.user.as_str() {
            "" => User::default(),
            u => {
                self.users
                    .into_iter()
                    .find(|x| x.name == u)
                    .ok_or_else(|| missing("user", u))?
                    .user
            }
        };
        Ok((cluster, user))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kubeconfig in YAML: one context, its cluster (with
    /// `cluster_extra`'s lines) and its user (`user`'s lines).
    fn base(user: &str, cluster_extra: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  \
             context: {{cluster: k, user: u}}\nclusters:\n- name: k\n  cluster:\n    \
             server: https://127.0.0.1:6443\n{cluster_extra}users:\n- name: u\n  user:\n{user}"
        )
    }

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("kubeconfig");
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A self-signed certificate (no key kept): a CA that parses.
    const CA: &str = "-----BEGIN CERTIFICATE-----\n\
MIIBmjCCAT+gAwIBAgIUexKKWZ2d1l+9xVY2fgpUIauBwAMwCgYIKoZIzj0EAwIw\n\
ITEfMB0GA1UEAwwWdGVudXJlLWt1YmVjb25maWctdGVzdDAgFw0yNjEyMDYwOTMy\n\
MTVaGA8yMTI2MTExMjA5MzIxNVowITEfMB0GA1UEAwwWdGVudXJlLWt1YmVjb25m\n\
aWctdGVzdDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABMD//pF2OnOv6YNT1OW2\n\
J3iNy4VqmT/dVH9C+zxVEbMlONivKKSwihky9SoUfv6XhiSiW3rQ7rfv5aWxrWqJ\n\
g9GjUzBRMB0GA1UdDgQWBBQmHi6jU1awApRl2XfnM4nQfYUQ4jAfBgNVHSMEGDAW\n\
gBQmHi6jU1awApRl2XfnM4nQfYUQ4jAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49\n\
BAMCA0kAMEYCIQDYtnwZSdEkwiiasbb/1ReRoS3df3xr/7eFnySFZZqz4gIhAJFo\n\
UvYl8q8hH042urezgLgZKhYFFbNF30IWS93McOPF\n\
-----END CERTIFICATE-----\n";

    #[test]
    fn servers_are_https_urls() {
        let s = Server::parse("https://10.0.0.1:6443").unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.path.as_str()),
            ("10.0.0.1", 6443, "")
        );
        let s = Server::parse("https://[fd00::1]/k8s/clusters/c-1/").unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.path.as_str()),
            ("fd00::1", 443, "/k8s/clusters/c-1")
        );
        assert!(Server::parse("http://10.0.0.1:8080").is_err());
        assert!(Server::parse("https://:1").is_err());
    }

    #[test]
    fn auth_providers_and_skipped_verification_are_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let exec = base(
            "    exec:\n      command: aws\n      args: [eks, get-token]\n",
            "",
        );
        let cfg = ApiConfig::from_kubeconfig(&write(dir.path(), &exec)).unwrap();
        assert!(matches!(cfg.credential, Credential::Exec(_)));
        let asking = base(
            "    exec:\n      command: kubelogin\n      interactiveMode: Always\n",
            "",
        );
        let e = ApiConfig::from_kubeconfig(&write(dir.path(), &asking)).unwrap_err();
        assert!(e.to_string().contains("no terminal"), "{e}");
        let provider = base("    auth-provider:\n      name: gcp\n", "");
        let e = ApiConfig::from_kubeconfig(&write(dir.path(), &provider)).unwrap_err();
        assert!(e.to_string().contains("auth-provider"), "{e}");
        let insecure = base("    token: t\n", "    insecure-skip-tls-verify: true\n");
        let e = ApiConfig::from_kubeconfig(&write(dir.path(), &insecure)).unwrap_err();
        assert!(matches!(e, ConfigError::Insecure), "{e}");
        let no_ctx = "apiVersion: v1\nkind: Config\nclusters: []\n";
        let e = ApiConfig::from_kubeconfig(&write(dir.path(), no_ctx)).unwrap_err();
        assert!(e.to_string().contains("current-context"), "{e}");
    }

    #[test]
    fn a_token_file_is_relative_to_the_kubeconfig_and_read_at_each_request() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), CA).unwrap();
        std::fs::write(dir.path().join("t"), "first\n").unwrap();
        let text = "{\"current-context\":\"c\",\"contexts\":[{\"name\":\"c\",\"context\":\
                    {\"cluster\":\"k\",\"user\":\"u\"}}],\"clusters\":[{\"name\":\"k\",\
                    \"cluster\":{\"server\":\"https://127.0.0.1:1\",\"certificate-authority\":\
                    \"ca.crt\"}}],\"users\":[{\"name\":\"u\",\"user\":{\"tokenFile\":\"t\"}}]}";
        // The JSON form is read too; the token file is read at each request.
        let cfg = ApiConfig::from_kubeconfig(&write(dir.path(), text)).unwrap();
        assert_eq!(cfg.bearer().unwrap().as_deref(), Some("Bearer first"));
        std::fs::write(dir.path().join("t"), "second").unwrap();
        assert_eq!(cfg.bearer().unwrap().as_deref(), Some("Bearer second"));
        // A CA that is no certificate is named.
        std::fs::write(dir.path().join("ca.crt"), "not a certificate").unwrap();
        let e = ApiConfig::from_kubeconfig(&write(dir.path(), text)).unwrap_err();
        assert!(e.to_string().contains("certificate-authority"), "{e}");
    }

    #[test]
    fn with_both_token_and_token_file_the_file_wins_as_client_go_reads_them() {
        // client-go (tools/clientcmd/api/types.go): "If both Token and
        // TokenFile are present, the TokenFile will be periodically read
        // and the last successfully read value takes precedence over Token."
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), CA).unwrap();
        let user = "    token: inline\n    tokenFile: t\n";
        let ca = format!(
            "    certificate-authority: {}\n",
            dir.path().join("ca.crt").display()
        );
        let kubeconfig = write(dir.path(), &base(user, &ca));
        // The file not there yet: the inline token serves.
        let cfg = ApiConfig::from_kubeconfig(&kubeconfig).unwrap();
        assert_eq!(cfg.bearer().unwrap().as_deref(), Some("Bearer inline"));
        std::fs::write(dir.path().join("t"), "from-file\n").unwrap();
        assert_eq!(cfg.bearer().unwrap().as_deref(), Some("Bearer from-file"));
        // Gone or emptied: the last token read stands, not the inline one.
        std::fs::write(dir.path().join("t"), "  \n").unwrap();
        assert_eq!(cfg.bearer().unwrap().as_deref(), Some("Bearer from-file"));
        std::fs::remove_file(dir.path().join("t")).unwrap();
        assert_eq!(cfg.bearer().unwrap().as_deref(), Some("Bearer from-file"));
        // Without an inline token, a file never read is an error naming it.
        let only_file = write(dir.path(), &base("    tokenFile: t\n", &ca));
        let e = ApiConfig::from_kubeconfig(&only_file)
            .unwrap()
            .bearer()
            .unwrap_err();
        assert!(e.to_string().contains("/t"), "{e}");
        std::fs::write(dir.path().join("t"), "\n").unwrap();
        let e = ApiConfig::from_kubeconfig(&only_file)
            .unwrap()
            .bearer()
            .unwrap_err();
        assert!(format!("{e:?}").contains("empty"), "{e:?}");
    }

    #[test]
    fn a_client_certificate_and_its_key_go_together() {
        let dir = tempfile::tempdir().unwrap();
        let made = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"])
            .args(["-subj", "/CN=tenure/O=readers", "-keyout"])
            .arg(dir.path().join("key.pem"))
            .arg("-out")
            .arg(dir.path().join("cert.pem"))
            .output();
        if !made.is_ok_and(|o| o.status.success()) {
            eprintln!("no openssl: skipped");
            return;
        }
        std::fs::write(dir.path().join("ca.crt"), CA).unwrap();
        let key = std::fs::read(dir.path().join("key.pem")).unwrap();
        let encoded = base64(&key);
        let config = |user: &str| {
            format!(
                "current-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\n\
                 clusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:6443\n    \
                 certificate-authority: ca.crt\nusers:\n- name: u\n  user:\n{user}"
            )
        };
        // The certificate from a file, its key inline.
        let both = config(&format!(
            "    client-certificate: cert.pem\n    client-key-data: {encoded}\n"
        ));
        let cfg = ApiConfig::from_kubeconfig(&write(dir.path(), &both)).unwrap();
        assert!(cfg.tls.client_auth_cert_resolver.has_certs());
        assert_eq!(cfg.bearer().unwrap(), None);
        let alone = config("    client-certificate: cert.pem\n");
        let e = ApiConfig::from_kubeconfig(&write(dir.path(), &alone)).unwrap_err();
        assert!(e.to_string().contains("give both"), "{e}");
    }

    /// Standard base64 with padding, as kubectl writes `-data` fields.
    fn base64(bytes: &[u8]) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for c in bytes.chunks(3) {
            let n = c
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
            for i in 0..4 {
                if i <= c.len() {
                    out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[test]
    fn in_cluster_needs_the_pods_service_account() {
        let dir = tempfile::tempdir().unwrap();
        let e = ApiConfig::in_cluster_at(None, None, dir.path()).unwrap_err();
        assert!(e.to_string().contains("KUBERNETES_SERVICE_HOST"), "{e}");
        let e = ApiConfig::in_cluster_at(Some("10.0.0.1".into()), None, dir.path()).unwrap_err();
        assert!(e.to_string().contains("token"), "{e}");
        std::fs::write(dir.path().join("token"), "tok\n").unwrap();
        std::fs::write(dir.path().join("ca.crt"), CA).unwrap();
        let cfg =
            ApiConfig::in_cluster_at(Some("10.0.0.1".into()), Some("6443".into()), dir.path())
                .unwrap();
        assert_eq!((cfg.authority.as_str(), cfg.port), ("10.0.0.1:6443", 6443));
        assert_eq!(cfg.bearer().unwrap().as_deref(), Some("Bearer tok"));
        let v6 = ApiConfig::in_cluster_at(Some("fd00::1".into()), None, dir.path()).unwrap();
        assert_eq!(
            (v6.authority.as_str(), v6.host.as_str()),
            ("[fd00::1]:443", "fd00::1")
        );
    }
}
