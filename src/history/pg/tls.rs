//! TLS to PostgreSQL, with libpq's URL parameters and meanings, so a URL
//! that works with `psql` works here:
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `allow`, `prefer` (libpq's default) | if the server offers it | as `require` |
//! | `require` | always | not verified (encryption only), unless `sslrootcert` is given or `~/.postgresql/root.crt` exists: then as `verify-ca` |
//! | `verify-ca` | always | signed by a CA in `sslrootcert` |
//! | `verify-full` | always | signed by a CA in `sslrootcert`, and names the URL's host |
//!
//! `sslrootcert=FILE` (PEM, one or more CAs) or `sslrootcert=system` (the
//! system's CAs; as libpq 16, it means `verify-full`, and a weaker
//! `sslmode` with it is refused: any public CA would do otherwise); without
//! it the verifying modes use libpq's default `~/.postgresql/root.crt`,
//! and refuse to start when it is missing.
//! `sslcert=FILE` and `sslkey=FILE` give a client certificate (for `cert`
//! authentication in `pg_hba.conf`). These parameters are taken out of the
//! URL here: the driver does not know them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use postgres::config::SslMode;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(s: &str) -> Result<Mode, String> {
        Ok(match s {
            "disable" => Mode::Disable,
            "allow" => Mode::Allow,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                ))
            }
        })
    }

    /// What the driver is told: whether TLS may be skipped.
    pub fn driver_mode(self) -> SslMode {
        match self {
            Mode::Disable => SslMode::Disable,
            Mode::Allow | Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }
}

/// The TLS parameters of a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub mode: Mode,
    /// `sslrootcert`: a PEM file, or `system`.
    pub root: Option<String>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// Splits `url` into what the driver parses and the TLS parameters.
pub fn split(url: &str) -> Result<(String, Tls), String> {
    let mut tls = Tls {
        mode: Mode::Prefer,
        root: None,
        cert: None,
        key: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), tls));
    };
    let mut mode = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let value = || percent_decode(v);
        match k {
            "sslmode" => mode = Some(Mode::parse(&value())?),
            "sslrootcert" => tls.root = Some(value()),
            "sslcert" => tls.cert = Some(PathBuf::from(value())),
            "sslkey" => tls.key = Some(PathBuf::from(value())),
            _ => kept.push(pair),
        }
    }
    tls.mode = match (mode, tls.root.as_deref()) {
        (None | Some(Mode::VerifyFull), Some("system")) => Mode::VerifyFull,
        (Some(weaker), Some("system")) => {
            return Err(format!(
                "sslrootcert=system trusts every public CA, so it needs sslmode=verify-full \
                 (as libpq does), not {weaker:?}: use verify-full, or give the CA file"
            ))
        }
        (Some(m), _) => m,
        (None, _) => Mode::Prefer,
    };
    if tls.cert.is_some() != tls.key.is_some() {
        return Err("sslcert and sslkey go together: give both, or neither".to_owned());
    }
    let rest = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((rest, tls))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied(), b.get(i + 2).copied()) {
            (b'%', Some(h), Some(l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The connector for `tls` (`None`: `sslmode=disable`). Reads the files.
pub fn connector(tls: &Tls) -> Result<Option<MakeRustlsConnect>, String> {
    if tls.mode == Mode::Disable {
        return Ok(None);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // libpq verifies the chain in every mode once a root is known: given,
    // or its default file present.
    let verify_chain = matches!(tls.mode, Mode::VerifyCa | Mode::VerifyFull)
        || tls.root.is_some()
        || default_root().is_some();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = if verify_chain {
        let roots = Arc::new(roots(tls)?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|e| format!("TLS setup: sslrootcert: {e}"))?;
        if tls.mode == Mode::VerifyFull {
            webpki
        } else {
            Arc::new(ChainOnly(webpki))
        }
    } else {
        Arc::new(EncryptOnly(provider))
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|i| i.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("TLS setup: sslcert={}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!(
                    "TLS setup: sslcert={}: no PEM certificate in it",
                    cert.display()
                ));
            }
            let key_der = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("TLS setup: sslkey={}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| format!("TLS setup: sslcert/sslkey: {e}"))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Some(MakeRustlsConnect::new(config)))
}

/// The CAs the chain must lead to.
fn roots(tls: &Tls) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    let file = match tls.root.as_deref() {
        Some("system") => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err("TLS setup: sslrootcert=system: no CA found on this system".into());
            }
            return Ok(store);
        }
        Some(path) => PathBuf::from(path),
        None => default_root().ok_or_else(|| {
            "TLS setup: sslmode verify-ca/verify-full needs the CA that signed PostgreSQL's \
             certificate: add sslrootcert=FILE (or sslrootcert=system) to the URL"
                .to_owned()
        })?,
    };
    let certs = CertificateDer::pem_file_iter(&file)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("TLS setup: sslrootcert={}: {e}", file.display()))?;
    let (added, _) = store.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!(
            "TLS setup: sslrootcert={}: no PEM certificate in it",
            file.display()
        ));
    }
    Ok(store)
}

/// libpq's default root file, if it exists.
fn default_root() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let p = Path::new(&home).join(".postgresql/root.crt");
    p.exists().then_some(p)
}

/// `verify-ca`: the chain is verified, the name is not.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain first, then the name: a name error means
        // the chain was good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `require` without `sslrootcert` (libpq's meaning): encrypted, the
/// certificate not verified; the handshake's signatures still are.
#[derive(Debug)]
struct EncryptOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// What to do about a TLS failure, from the driver's error text.
pub fn hint(text: &str) -> Option<&'static str> {
    let t = text;
    if t.contains("UnknownIssuer") || t.contains("unknown issuer") {
        Some(
            "PostgreSQL's certificate is not signed by a CA in sslrootcert: give the CA that \
             signed it (or sslmode=require to encrypt without verifying)",
        )
    } else if t.contains("NotValidForName") || t.contains("not valid for name") {
        Some(
            "PostgreSQL's certificate does not name the host of the URL: connect by a name \
             it carries, or use sslmode=verify-ca",
        )
    } else if t.contains("invalid peer certificate") && t.contains("Expired") {
        Some("PostgreSQL's certificate has expired: renew it (or check this machine's clock)")
    } else if t.contains("CertificateExpired") {
        Some("PostgreSQL refused the client certificate as expired: renew sslcert")
    } else if t.contains("server does not support TLS") {
        Some("the server has TLS off (ssl = off): enable it there, or use sslmode=prefer")
    } else if t.contains("no encryption") {
        Some(
            "pg_hba.conf admits no unencrypted connection for this user and database: if the \
             server requires TLS, use sslmode=require or verify-full; else check the user and \
             database",
        )
    } else if t.contains("requires a valid client certificate") || t.contains("CertificateRequired")
    {
        Some("the server requires a client certificate: add sslcert=FILE&sslkey=FILE")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_are_taken_out_of_the_url() {
        let (rest, tls) = split(
            "postgres://u@db:5432/h?sslmode=verify-full&application_name=x&sslrootcert=%2Fetc%2Fca.pem",
        )
        .expect("split");
        assert_eq!(rest, "postgres://u@db:5432/h?application_name=x");
        assert_eq!(tls.mode, Mode::VerifyFull);
        assert_eq!(tls.root.as_deref(), Some("/etc/ca.pem"));
        let (rest, tls) = split("postgres://u@db/h").expect("split");
        assert_eq!(
            (rest.as_str(), tls.mode),
            ("postgres://u@db/h", Mode::Prefer)
        );
        let (rest, _) = split("postgres://u@db/h?sslmode=disable").expect("split");
        assert_eq!(rest, "postgres://u@db/h");
        assert!(split("postgres://u@db/h?sslmode=strict")
            .unwrap_err()
            .contains("not one of"));
        // sslrootcert=system means verify-full, and refuses weaker modes.
        let (_, tls) = split("postgres://u@db/h?sslrootcert=system").expect("split");
        assert_eq!(tls.mode, Mode::VerifyFull);
        assert!(
            split("postgres://u@db/h?sslrootcert=system&sslmode=require")
                .unwrap_err()
                .contains("needs sslmode=verify-full")
        );
        assert!(split("postgres://u@db/h?sslcert=/a.pem")
            .unwrap_err()
            .contains("go together"));
    }

    #[test]
    fn verifying_modes_need_a_root_and_files_must_exist() {
        let (_, tls) = split("postgres://u@db/h?sslmode=verify-full&sslrootcert=/nonexistent.pem")
            .expect("split");
        let e = connector(&tls).err().expect("missing file");
        assert!(e.contains("sslrootcert=/nonexistent.pem"), "{e}");
        let (_, tls) = split("postgres://u@db/h?sslmode=require").expect("split");
        assert!(connector(&tls).is_ok());
        let (_, tls) = split("postgres://u@db/h?sslmode=disable").expect("split");
        assert!(connector(&tls).expect("disable").is_none());
    }
}
