//! The authentication flags, with upstream's names and defaults
//! (`BuiltInAuthenticationOptions`, `ClientCertAuthenticationOptions`, and the
//! service-account signing flags of the server run options).

use std::path::PathBuf;
use std::time::Duration;

fn go_duration(s: &str) -> Result<Duration, String> {
    component_base::duration::parse(s)
}

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// If set, the file that will be used to secure the secure port of the API server via token
    /// authentication.
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// Enables anonymous requests to the secure port of the API server. Requests that are not rejected by
    /// another authentication method are treated as anonymous requests. Anonymous requests have a username of
    /// system:anonymous, and a group name of system:unauthenticated.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true", action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,
    /// If set, any request presenting a client certificate signed by one of the authorities in the client-ca-
    /// file is authenticated with an identity corresponding to the CommonName of the client certificate.
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Enable to allow secrets of type 'bootstrap.kubernetes.io/token' in the 'kube-system' namespace to be
    /// used for TLS bootstrapping authentication.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub enable_bootstrap_token_auth: bool,
    /// File containing PEM-encoded x509 RSA or ECDSA private or public keys, used to verify ServiceAccount
    /// tokens. The specified file can contain multiple keys, and the flag can be specified multiple times
    /// with different files. If unspecified, --tls-private-key-file is used.
    #[arg(long = "service-account-key-file")]
    pub service_account_key_files: Vec<PathBuf>,
    /// Path to the file that contains the current private key of the service account token issuer. The issuer
    /// will sign issued ID tokens with this private key.
    #[arg(long)]
    pub service_account_signing_key_file: Option<PathBuf>,
    /// Identifier of the service account token issuer. The issuer will assert this identifier in "iss" claim
    /// of issued tokens. When this flag is specified multiple times, the first is used to generate tokens and
    /// all are used to determine which issuers are accepted.
    #[arg(long = "service-account-issuer")]
    pub service_account_issuers: Vec<String>,
    /// Overrides the URI for the JSON Web Key Set in the discovery doc served at
    /// /.well-known/openid-configuration. This flag is useful if the discovery doc and key set
    /// are served to relying parties from a URL other than the API server's external (as
    /// auto-detected or overridden with external-hostname).
    #[arg(long)]
    pub service_account_jwks_uri: Option<String>,
    /// Identifiers of the API. The service account token authenticator will validate that tokens used against
    /// the API are bound to at least one of these audiences. If the --service-account-issuer flag is
    /// configured and this flag is not, this field defaults to a single element list containing the issuer
    /// URL.
    #[arg(long = "api-audiences", value_delimiter = ',')]
    pub api_audiences: Vec<String>,
    /// The maximum validity duration of a token created by the service account token issuer. If an otherwise
    /// valid TokenRequest with a validity duration larger than this value is requested, a token will be
    /// issued with a validity duration of this value.
    #[arg(long, value_parser = go_duration, default_value = "0s")]
    pub service_account_max_token_expiration: Duration,
    /// If true, validate ServiceAccount tokens exist in etcd as part of authentication.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true", action = clap::ArgAction::Set)]
    pub service_account_lookup: bool,
    /// Turns on projected service account expiration extension during token generation, which helps safe
    /// transition from legacy token to bound service account token feature. If this flag is enabled,
    /// admission injected tokens would be extended up to 1 year to prevent unexpected failure during
    /// transition, ignoring value of service-account-max-token-expiration.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "true", action = clap::ArgAction::Set)]
    pub service_account_extend_token_expiration: bool,
    #[command(flatten)]
    pub request_header: RequestHeaderOptions,
}

/// The front-proxy flags (upstream's `RequestHeaderAuthenticationOptions`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RequestHeaderOptions {
    /// Root certificate bundle to use to verify client certificates on incoming requests before trusting
    /// usernames in headers specified by --requestheader-username-headers. WARNING: generally do not depend on
    /// authorization being already done for incoming requests.
    #[arg(long)]
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// List of client certificate common names to allow to provide usernames in headers specified by
    /// --requestheader-username-headers. If empty, any client certificate validated by the authorities in
    /// --requestheader-client-ca-file is allowed.
    #[arg(long, value_delimiter = ',')]
    pub requestheader_allowed_names: Vec<String>,
    /// List of request headers to inspect for usernames. X-Remote-User is common.
    #[arg(long, value_delimiter = ',')]
    pub requestheader_username_headers: Vec<String>,
    /// List of request headers to inspect for groups. X-Remote-Group is suggested.
    #[arg(long, value_delimiter = ',')]
    pub requestheader_group_headers: Vec<String>,
    /// List of request header prefixes to inspect. X-Remote-Extra- is suggested.
    #[arg(long, value_delimiter = ',')]
    pub requestheader_extra_headers_prefix: Vec<String>,
}

impl RequestHeaderOptions {
    pub fn config(&self) -> super::request_header::Config {
        super::request_header::Config {
            allowed_names: self.requestheader_allowed_names.clone(),
            username_headers: self.requestheader_username_headers.clone(),
            group_headers: self.requestheader_group_headers.clone(),
            extra_headers_prefix: self.requestheader_extra_headers_prefix.clone(),
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        super::request_header::validate(&[
            ("requestheader-username-headers", &self.requestheader_username_headers),
            ("requestheader-group-headers", &self.requestheader_group_headers),
            ("requestheader-extra-headers-prefix", &self.requestheader_extra_headers_prefix),
            ("requestheader-allowed-names", &self.requestheader_allowed_names),
        ])?;
        if !self.requestheader_username_headers.is_empty()
            && !self.requestheader_username_headers.iter().any(|h| h.eq_ignore_ascii_case("X-Remote-User"))
        {
            tracing::warn!(
                "--requestheader-username-headers is set without specifying the standard X-Remote-User header - API aggregation will not work"
            );
        }
        Ok(())
    }
}

/// `--service-account-max-token-expiration`, when set, lies in [1 h, 2^32 s].
const MIN_MAX_EXPIRATION: Duration = Duration::from_secs(3600);
const MAX_MAX_EXPIRATION: Duration = Duration::from_secs(1 << 32);

impl Options {
    /// `--api-audiences`, defaulting to the issuers.
    pub fn api_audiences(&self) -> Vec<String> {
        if self.api_audiences.is_empty() {
            self.service_account_issuers.clone()
        } else {
            self.api_audiences.clone()
        }
    }

    /// Upstream's checks of these flags (its `Validate` and `validateTokenRequest`).
    /// Unlike upstream, the TokenRequest flags may all be left out: the server then has
    /// no `serviceaccounts/token` and verifies no bound tokens.
    pub fn validate(&self) -> Result<(), String> {
        self.request_header.validate()?;
        let mut errors = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for issuer in &self.service_account_issuers {
            if issuer.is_empty() {
                errors.push("service-account-issuer should not be an empty string".to_string());
            } else if issuer.contains(':') && url::Url::parse(issuer).is_err() {
                errors.push(format!(
                    "service-account-issuer {issuer:?} contained a ':' but was not a valid URL"
                ));
            } else if !seen.insert(issuer) {
                errors.push(format!("service-account-issuer {issuer:?} is already specified"));
            }
        }
        let attempted = self.service_account_signing_key_file.is_some()
            || self.service_account_issuers.first().is_some_and(|i| !i.is_empty())
            || !self.api_audiences.is_empty();
        let complete = self.service_account_signing_key_file.is_some()
            && self.service_account_issuers.first().is_some_and(|i| !i.is_empty());
        if attempted && !complete {
            errors.push(
                "--service-account-signing-key-file, --service-account-issuer, and --api-audiences should be specified together"
                    .to_string(),
            );
        }
        let max = self.service_account_max_token_expiration;
        if !max.is_zero() && !(MIN_MAX_EXPIRATION..=MAX_MAX_EXPIRATION).contains(&max) {
            errors.push(
                "the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"
                    .to_string(),
            );
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(format!("[{}]", errors.join(", "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        opts: Options,
    }

    fn parse(args: &[&str]) -> Options {
        Flags::try_parse_from(std::iter::once("kube-apiserver").chain(args.iter().copied())).unwrap().opts
    }

    #[test]
    fn defaults_and_repeated_flags() {
        let o = parse(&[]);
        assert!(o.anonymous_auth && o.service_account_lookup && o.service_account_extend_token_expiration);
        assert!(!o.enable_bootstrap_token_auth);
        assert!(o.service_account_max_token_expiration.is_zero());
        assert!(o.validate().is_ok());

        let o = parse(&[
            "--service-account-issuer=https://a",
            "--service-account-issuer=https://b",
            "--service-account-key-file=/k1",
            "--service-account-key-file=/k2",
            "--service-account-signing-key-file=/s",
            "--service-account-max-token-expiration=24h",
            "--service-account-lookup=false",
            "--enable-bootstrap-token-auth",
        ]);
        assert_eq!(o.service_account_issuers, vec!["https://a", "https://b"]);
        assert_eq!(o.service_account_key_files.len(), 2);
        assert_eq!(o.api_audiences(), vec!["https://a", "https://b"]);
        assert_eq!(o.service_account_max_token_expiration, Duration::from_secs(86400));
        assert!(!o.service_account_lookup && o.enable_bootstrap_token_auth);
        assert!(o.validate().is_ok());
        assert_eq!(
            parse(&[
                "--api-audiences=x,y",
                "--service-account-issuer=i",
                "--service-account-signing-key-file=/s"
            ])
            .api_audiences(),
            vec!["x", "y"]
        );
    }

    #[test]
    fn request_header_flags() {
        let o = parse(&[
            "--requestheader-client-ca-file=/fp.crt",
            "--requestheader-allowed-names=front-proxy-client,other",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        ]);
        let rh = &o.request_header;
        assert_eq!(rh.requestheader_client_ca_file.as_deref(), Some(std::path::Path::new("/fp.crt")));
        assert_eq!(rh.requestheader_allowed_names, ["front-proxy-client", "other"]);
        assert_eq!(rh.config().extra_headers_prefix, ["X-Remote-Extra-"]);
        assert!(o.validate().is_ok());
        assert!(parse(&["--requestheader-group-headers=X-Remote-Group, "]).validate().is_err());
    }

    #[test]
    fn incomplete_or_bad_settings_are_refused() {
        let e = parse(&["--service-account-issuer=https://a"]).validate().unwrap_err();
        assert!(e.contains("should be specified together"), "{e}");
        assert!(parse(&["--service-account-signing-key-file=/s"]).validate().is_err());
        let bad_max = parse(&[
            "--service-account-issuer=i",
            "--service-account-signing-key-file=/s",
            "--service-account-max-token-expiration=10m",
        ]);
        assert!(bad_max.validate().unwrap_err().contains("between 1 hour and 2^32 seconds"));
        let dup = parse(&[
            "--service-account-issuer=i",
            "--service-account-issuer=i",
            "--service-account-signing-key-file=/s",
        ]);
        assert!(dup.validate().unwrap_err().contains("already specified"));
    }
}
