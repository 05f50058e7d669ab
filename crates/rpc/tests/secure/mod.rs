//! What the TLS and QUIC tests share: a service that tells a client what the server saw
//! of it, and certificates made with rcgen.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;

use rcgen::{BasicConstraints, Certificate, CertificateParams, IsCa, KeyPair, SanType};
use volley_rpc::{Context, HandlerError};

/// What the server saw of a client: DNS names, URI names, the certificate's DER, the
/// TLS version.
pub type Seen = (Vec<String>, Vec<String>, Option<Vec<u8>>, String);

volley_rpc::service! {
    /// What the TLS tests call.
    pub service Secure {
        /// What the server saw of this client: DNS names, URI names, the certificate's
        /// DER, the TLS version.
        1 => fn who() -> Seen;
        /// The segments sent, sent back; their total length.
        2 => fn bounce() -> u64;
    }
}

pub struct Here;

impl SecureServer for Here {
    async fn who(&self, cx: Context<Secure>) -> Result<Seen, HandlerError> {
        let tls = cx
            .connection()
            .tls
            .clone()
            .ok_or_else(|| HandlerError::msg("not over TLS"))?;
        Ok((
            tls.dns_names,
            tls.uri_names,
            tls.certificate.map(|c| c.to_vec()),
            tls.version,
        ))
    }

    async fn bounce(&self, mut cx: Context<Secure>) -> Result<u64, HandlerError> {
        let segments = cx.take_segments();
        let len = segments.iter().map(|s| s.len() as u64).sum();
        cx.reply_segments(segments);
        Ok(len)
    }
}

/// A CA, and the PEM files of certificates it signs, in a directory of the test's own.
pub struct Pki {
    pub dir: PathBuf,
    ca: Certificate,
    ca_key: KeyPair,
}

impl Pki {
    pub fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("volley-rpc-tls-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} CA"));
        let ca = params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.join("ca.key"), ca_key.serialize_pem()).unwrap();
        Self { dir, ca, ca_key }
    }

    /// A certificate for `name` valid only in 2025: its chain and key files.
    pub fn expired(&self, file: &str, name: &str) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2025, 1, 1);
        params.not_after = rcgen::date_time_ymd(2025, 12, 31);
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let (cert_path, key_path) = (
            self.dir.join(format!("{file}.pem")),
            self.dir.join(format!("{file}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path)
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A certificate for `names` (DNS names or IP addresses) and `uris`, signed by the
    /// CA: its chain and key files, and its DER.
    pub fn issue(&self, file: &str, names: &[&str], uris: &[&str]) -> (PathBuf, PathBuf, Vec<u8>) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        for uri in uris {
            params
                .subject_alt_names
                .push(SanType::URI((*uri).try_into().unwrap()));
        }
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let (cert_path, key_path) = (
            self.dir.join(format!("{file}.pem")),
            self.dir.join(format!("{file}.key")),
        );
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        (cert_path, key_path, cert.der().to_vec())
    }
}
