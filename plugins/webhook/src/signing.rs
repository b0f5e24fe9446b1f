//! Standard Webhooks signatures (`webhook-id`, `webhook-timestamp`, `webhook-signature`): an
//! HMAC-SHA256 of `{id}.{timestamp}.{body}` under each secret of the manifest's
//! `[config] signing_secrets`, so a receiver can tell the request came from us, unchanged and
//! recently.
//!
//! Secrets are never quoted: an error names a secret by its position in the list only.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::alphabet;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `[config]` key holding the secrets, space-separated.
pub const SECRETS_KEY: &str = "signing_secrets";

const PREFIX: &str = "whsec_";
/// The specification's bounds for a symmetric secret: at least 192 bits, at most 512.
const MIN_SECRET_BYTES: usize = 24;
const MAX_SECRET_BYTES: usize = 64;

/// Standard base64, its padding optional: other implementations hand out secrets both ways.
const SECRET_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The keys to sign with, in the order the manifest lists them. No `Debug`: it holds secrets.
pub struct Secrets(Vec<Vec<u8>>);

/// Why `signing_secrets` cannot be used. Names the secret by position, never by value.
#[derive(Debug, PartialEq, Eq)]
pub enum SecretsError {
    /// The key is set but lists nothing: signing was asked for, so sending unsigned would be wrong.
    Empty,
    NoPrefix {
        position: usize,
    },
    NotBase64 {
        position: usize,
    },
    Length {
        position: usize,
        bytes: usize,
    },
}

impl fmt::Display for SecretsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[config] {SECRETS_KEY}: ")?;
        match self {
            Self::Empty => write!(f, "set but lists no secret"),
            Self::NoPrefix { position } => {
                write!(f, "secret {position} does not start with `{PREFIX}`")
            }
            Self::NotBase64 { position } => {
                write!(f, "secret {position} is not base64 after `{PREFIX}`")
            }
            Self::Length { position, bytes } => write!(
                f,
                "secret {position} is {bytes} bytes; a secret is {MIN_SECRET_BYTES} to \
                 {MAX_SECRET_BYTES} bytes"
            ),
        }
    }
}

impl Secrets {
    /// Parses the space-separated `whsec_<base64>` values of `signing_secrets`; positions count
    /// from 1.
    pub fn parse(value: &str) -> Result<Self, SecretsError> {
        let mut keys = Vec::new();
        for (index, secret) in value.split_ascii_whitespace().enumerate() {
            let position = index + 1;
            let encoded = secret
                .strip_prefix(PREFIX)
                .ok_or(SecretsError::NoPrefix { position })?;
            let key = SECRET_BASE64
                .decode(encoded)
                .map_err(|_| SecretsError::NotBase64 { position })?;
            if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
                return Err(SecretsError::Length {
                    position,
                    bytes: key.len(),
                });
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(SecretsError::Empty);
        }
        Ok(Self(keys))
    }

    /// The `webhook-signature` value: `v1,<base64 HMAC-SHA256>` per secret, space-separated.
    pub fn signature(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let signatures: Vec<String> = self
            .0
            .iter()
            .map(|key| {
                let mut mac =
                    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
                mac.update(id.as_bytes());
                mac.update(b".");
                mac.update(timestamp.to_string().as_bytes());
                mac.update(b".");
                mac.update(body);
                format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
            })
            .collect();
        signatures.join(" ")
    }
}

/// Unix seconds now, from the sandbox's WASI wall clock (the host grants the real one). `None`
/// for a clock before 1970, which no receiver would accept.
pub fn unix_seconds_now() -> Option<u64> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .map(|since| since.as_secs())
}
