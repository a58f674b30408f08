//! The authorization flags, with upstream's names and defaults
//! (`BuiltInAuthorizationOptions`).

use std::path::PathBuf;
use std::time::Duration;

fn duration(s: &str) -> Result<Duration, String> {
    component_base::duration::parse(s)
}

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Ordered list of plug-ins to do authorization on secure port: AlwaysAllow, AlwaysDeny,
    /// RBAC, Node, Webhook.
    #[arg(long, default_value = "AlwaysAllow", value_delimiter = ',')]
    pub authorization_mode: Vec<String>,
    /// File with webhook configuration in kubeconfig format, used with
    /// --authorization-mode=Webhook. The API server will query the remote service to
    /// determine access on the API server's secure port.
    #[arg(long)]
    pub authorization_webhook_config_file: Option<PathBuf>,
    /// The API version of the authorization.k8s.io SubjectAccessReview to send to and
    /// expect from the webhook.
    #[arg(long, default_value = "v1beta1")]
    pub authorization_webhook_version: String,
    /// The duration to cache 'authorized' responses from the webhook authorizer.
    #[arg(long, default_value = "5m0s", value_parser = duration)]
    pub authorization_webhook_cache_authorized_ttl: Duration,
    /// The duration to cache 'unauthorized' responses from the webhook authorizer.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            authorization_mode: vec!["AlwaysAllow".into()],
            authorization_webhook_config_file: None,
            authorization_webhook_version: "v1beta1".into(),
            authorization_webhook_cache_authorized_ttl: Duration::from_secs(300),
            authorization_webhook_cache_unauthorized_ttl: Duration::from_secs(30),
        }
    }
}

impl Options {
    /// Upstream's `BuiltInAuthorizationOptions.Validate`: the webhook file goes with the
    /// Webhook mode, and the webhook version is one the server speaks.
    pub fn validate(&self, modes: &[String]) -> Result<(), String> {
        let webhook = modes.iter().any(|m| m == "Webhook");
        if webhook && self.authorization_webhook_config_file.is_none() {
            return Err("authorization-mode Webhook's authorization config file not passed".into());
        }
        if !webhook && self.authorization_webhook_config_file.is_some() {
            return Err("cannot specify --authorization-webhook-config-file without mode Webhook".into());
        }
        if !matches!(self.authorization_webhook_version.as_str(), "v1" | "v1beta1") {
            return Err(format!(
                "--authorization-webhook-version: invalid version {:?}: must be v1 or v1beta1",
                self.authorization_webhook_version
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        o: Options,
    }

    #[test]
    fn defaults_and_validation() {
        let f = Flags::try_parse_from(["x"]).unwrap().o;
        assert_eq!(f.authorization_mode, vec!["AlwaysAllow"]);
        assert_eq!(f.authorization_webhook_cache_authorized_ttl, Duration::from_secs(300));
        assert_eq!(f.authorization_webhook_cache_unauthorized_ttl, Duration::from_secs(30));
        let f = Flags::try_parse_from(["x", "--authorization-mode=Node,RBAC,Webhook"]).unwrap().o;
        assert_eq!(f.authorization_mode, vec!["Node", "RBAC", "Webhook"]);
        assert!(f.validate(&f.authorization_mode).unwrap_err().contains("config file not passed"));
        let f = Flags::try_parse_from(["x", "--authorization-webhook-config-file=/k"]).unwrap().o;
        assert!(f.validate(&f.authorization_mode).is_err());
        let f = Flags::try_parse_from(["x", "--authorization-webhook-version=v2"]).unwrap().o;
        assert!(f.validate(&f.authorization_mode).is_err());
        assert!(Flags::try_parse_from(["x", "--authorization-webhook-cache-authorized-ttl=soon"]).is_err());
    }
}
