//! `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`) from `--config`, with
//! upstream's defaults, and the expansion of its plugin sets into [`Profile`]s: the
//! default plugins are enabled at every extension point they implement (multiPoint),
//! then each profile's `multiPoint` and per-point `enabled`/`disabled` lists are merged
//! in as upstream's `mergePlugins` and `expandMultiPointPlugins` do.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::framework::Plugin;
use crate::framework::runtime::Profile;
use crate::plugins;

pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("decoding {path}: {message}")]
    Decode { path: PathBuf, message: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct File {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub parallelism: Option<i32>,
    #[serde(default)]
    pub leader_election: Option<LeaderElectionFile>,
    #[serde(default)]
    pub client_connection: Option<ClientConnection>,
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<i32>,
    #[serde(default)]
    pub pod_initial_backoff_seconds: Option<i64>,
    #[serde(default)]
    pub pod_max_backoff_seconds: Option<i64>,
    #[serde(default)]
    pub profiles: Vec<ProfileFile>,
    /// Only an empty list is accepted: scheduler extenders are not supported.
    #[serde(default)]
    pub extenders: Vec<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElectionFile {
    pub leader_elect: Option<bool>,
    pub lease_duration: Option<String>,
    pub renew_deadline: Option<String>,
    pub retry_period: Option<String>,
    pub resource_lock: Option<String>,
    pub resource_name: Option<String>,
    pub resource_namespace: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientConnection {
    pub kubeconfig: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProfileFile {
    pub scheduler_name: Option<String>,
    pub percentage_of_nodes_to_score: Option<i32>,
    #[serde(default)]
    pub plugins: Option<PluginsFile>,
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginsFile {
    #[serde(default)]
    pub pre_enqueue: PluginSet,
    #[serde(default)]
    pub queue_sort: PluginSet,
    #[serde(default)]
    pub pre_filter: PluginSet,
    #[serde(default)]
    pub filter: PluginSet,
    #[serde(default)]
    pub post_filter: PluginSet,
    #[serde(default)]
    pub pre_score: PluginSet,
    #[serde(default)]
    pub score: PluginSet,
    #[serde(default)]
    pub reserve: PluginSet,
    #[serde(default)]
    pub permit: PluginSet,
    #[serde(default)]
    pub pre_bind: PluginSet,
    #[serde(default)]
    pub bind: PluginSet,
    #[serde(default)]
    pub post_bind: PluginSet,
    #[serde(default)]
    pub multi_point: PluginSet,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSet {
    #[serde(default)]
    pub enabled: Vec<PluginRef>,
    #[serde(default)]
    pub disabled: Vec<PluginRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginRef {
    pub name: String,
    #[serde(default)]
    pub weight: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginConfig {
    pub name: String,
    #[serde(default)]
    pub args: Option<serde_json::Value>,
}

/// Leader election settings after defaulting.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub leader_elect: bool,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    pub resource_name: String,
    pub resource_namespace: String,
}

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            leader_elect: true,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            resource_name: "kube-scheduler".into(),
            resource_namespace: "kube-system".into(),
        }
    }
}

/// The configuration after defaulting and validation.
#[derive(Debug, Clone)]
pub struct Config {
    pub parallelism: usize,
    pub percentage_of_nodes_to_score: i32,
    pub pod_initial_backoff: Duration,
    pub pod_max_backoff: Duration,
    pub leader_election: LeaderElection,
    pub kubeconfig: Option<PathBuf>,
    pub profiles: Vec<ProfileFile>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            parallelism: 16,
            percentage_of_nodes_to_score: 0,
            pod_initial_backoff: Duration::from_secs(1),
            pod_max_backoff: Duration::from_secs(10),
            leader_election: LeaderElection::default(),
            kubeconfig: None,
            profiles: vec![ProfileFile::default()],
        }
    }
}

pub use component_base::duration::parse as parse_duration;

impl Config {
    /// Reads and validates `--config`.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let text =
            std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_owned(), source })?;
        let file: File = serde_yaml::from_str(&text)
            .map_err(|e| Error::Decode { path: path.to_owned(), message: e.to_string() })?;
        Self::from_parsed(file)
    }

    pub fn from_parsed(file: File) -> Result<Self, Error> {
        if file.api_version != "kubescheduler.config.k8s.io/v1" || file.kind != "KubeSchedulerConfiguration" {
            return Err(Error::Invalid(format!(
                "no kind \"{}\" is registered for version \"{}\" (want KubeSchedulerConfiguration in kubescheduler.config.k8s.io/v1)",
                file.kind, file.api_version
            )));
        }
        if !file.extenders.is_empty() {
            return Err(Error::Invalid("extenders: scheduler extenders are not supported".into()));
        }
        let mut cfg = Config::default();
        if let Some(p) = file.parallelism {
            if p <= 0 {
                return Err(Error::Invalid(format!(
                    "parallelism: Invalid value: {p}: should be an integer greater than 0"
                )));
            }
            cfg.parallelism = p as usize;
        }
        if let Some(p) = file.percentage_of_nodes_to_score {
            if !(0..=100).contains(&p) {
                return Err(Error::Invalid(format!(
                    "percentageOfNodesToScore: Invalid value: {p}: not in valid range [0-100]"
                )));
            }
            cfg.percentage_of_nodes_to_score = p;
        }
        if let Some(s) = file.pod_initial_backoff_seconds {
            if s <= 0 {
                return Err(Error::Invalid("podInitialBackoffSeconds: must be greater than 0".into()));
            }
            cfg.pod_initial_backoff = Duration::from_secs(s as u64);
        }
        if let Some(s) = file.pod_max_backoff_seconds {
            if (s as u64) < cfg.pod_initial_backoff.as_secs() {
                return Err(Error::Invalid(
                    "podMaxBackoffSeconds: must be at least podInitialBackoffSeconds".into(),
                ));
            }
            cfg.pod_max_backoff = Duration::from_secs(s as u64);
        }
        if let Some(le) = file.leader_election {
            let d = &mut cfg.leader_election;
            if let Some(v) = le.leader_elect {
                d.leader_elect = v;
            }
            let dur = |v: Option<String>, field: &str, into: &mut Duration| -> Result<(), Error> {
                if let Some(v) = v {
                    *into = parse_duration(&v)
                        .map_err(|e| Error::Invalid(format!("leaderElection.{field}: {e}")))?;
                }
                Ok(())
            };
            dur(le.lease_duration, "leaseDuration", &mut d.lease_duration)?;
            dur(le.renew_deadline, "renewDeadline", &mut d.renew_deadline)?;
            dur(le.retry_period, "retryPeriod", &mut d.retry_period)?;
            if let Some(lock) = le.resource_lock.filter(|l| l != "leases") {
                return Err(Error::Invalid(format!(
                    "leaderElection.resourceLock: Unsupported value: \"{lock}\": supported values: \"leases\""
                )));
            }
            if let Some(n) = le.resource_name {
                d.resource_name = n;
            }
            if let Some(n) = le.resource_namespace {
                d.resource_namespace = n;
            }
        }
        cfg.kubeconfig =
            file.client_connection.and_then(|c| c.kubeconfig).filter(|k| !k.is_empty()).map(PathBuf::from);
        if !file.profiles.is_empty() {
            cfg.profiles = file.profiles;
        }
        let mut seen = HashSet::new();
        for p in &cfg.profiles {
            let name = p.scheduler_name.clone().unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.into());
            if !seen.insert(name.clone()) {
                return Err(Error::Invalid(format!("profiles: Duplicate value: \"{name}\"")));
            }
            if let Some(pct) = p.percentage_of_nodes_to_score
                && !(0..=100).contains(&pct)
            {
                return Err(Error::Invalid(format!(
                    "profiles[{name}].percentageOfNodesToScore: not in valid range [0-100]"
                )));
            }
        }
        Ok(cfg)
    }
}

/// One extension point's enabled list after merging user settings into the defaults.
fn merge(defaults: &[(String, Option<i64>)], custom: &PluginSet) -> Vec<(String, Option<i64>)> {
    let disabled: HashSet<&str> = custom.disabled.iter().map(|p| p.name.as_str()).collect();
    let mut out: Vec<(String, Option<i64>)> = Vec::new();
    if !disabled.contains("*") {
        for (name, weight) in defaults {
            if disabled.contains(name.as_str()) {
                continue;
            }
            // A default that is also enabled by the user takes the user's weight, in place.
            let weight =
                custom.enabled.iter().find(|p| p.name == *name).map_or(*weight, |p| p.weight.or(*weight));
            out.push((name.clone(), weight));
        }
    }
    for p in &custom.enabled {
        if !out.iter().any(|(n, _)| *n == p.name) {
            out.push((p.name.clone(), p.weight));
        }
    }
    out
}

type Extracts = fn(&dyn Plugin) -> bool;

/// Builds a profile's framework. `client` goes to plugins that write (the binder).
pub fn build_profile(p: &ProfileFile, client: &kube::Client) -> Result<Profile, Error> {
    let name = p.scheduler_name.clone().unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.into());
    let invalid = |m: String| Error::Invalid(format!("profiles[{name}]: {m}"));
    let mut args: HashMap<&str, &serde_json::Value> = HashMap::new();
    for pc in &p.plugin_config {
        if !plugins::names().any(|n| n == pc.name) {
            return Err(invalid(format!("pluginConfig: plugin \"{}\" does not exist", pc.name)));
        }
        if args.insert(pc.name.as_str(), pc.args.as_ref().unwrap_or(&serde_json::Value::Null)).is_some() {
            return Err(invalid(format!("pluginConfig: Duplicate value: \"{}\"", pc.name)));
        }
    }
    let user = p.plugins.clone().unwrap_or_default();
    let defaults: Vec<(String, Option<i64>)> =
        plugins::DEFAULT_PLUGINS.iter().map(|(n, w)| (n.to_string(), *w)).collect();
    let multi = merge(&defaults, &user.multi_point);

    let mut instances: HashMap<String, Arc<dyn Plugin>> = HashMap::new();
    let mut instance = |n: &str| -> Result<Arc<dyn Plugin>, Error> {
        if let Some(i) = instances.get(n) {
            return Ok(i.clone());
        }
        let raw = args.get(n).copied().filter(|v| !v.is_null());
        let built = plugins::build(n, raw, client).map_err(invalid)?;
        instances.insert(n.to_owned(), built.clone());
        Ok(built)
    };

    let mut profile = Profile {
        name: name.clone(),
        percentage_of_nodes_to_score: p.percentage_of_nodes_to_score,
        ..Profile::default()
    };
    let points: [(&str, &PluginSet, Extracts); 12] = [
        ("queueSort", &user.queue_sort, |p| p.as_queue_sort().is_some()),
        ("preEnqueue", &user.pre_enqueue, |p| p.as_pre_enqueue().is_some()),
        ("preFilter", &user.pre_filter, |p| p.as_pre_filter().is_some()),
        ("filter", &user.filter, |p| p.as_filter().is_some()),
        ("postFilter", &user.post_filter, |p| p.as_post_filter().is_some()),
        ("preScore", &user.pre_score, |p| p.as_pre_score().is_some()),
        ("score", &user.score, |p| p.as_score().is_some()),
        ("reserve", &user.reserve, |p| p.as_reserve().is_some()),
        ("permit", &user.permit, |p| p.as_permit().is_some()),
        ("preBind", &user.pre_bind, |p| p.as_pre_bind().is_some()),
        ("bind", &user.bind, |p| p.as_bind().is_some()),
        ("postBind", &user.post_bind, |p| p.as_post_bind().is_some()),
    ];
    for (point, set, implements) in points {
        let disabled: HashSet<&str> = set.disabled.iter().map(|p| p.name.as_str()).collect();
        let mut list: Vec<(Arc<dyn Plugin>, i64)> = Vec::new();
        for (n, weight) in &multi {
            if disabled.contains("*")
                || disabled.contains(n.as_str())
                || set.enabled.iter().any(|e| e.name == *n)
            {
                continue;
            }
            let plugin = instance(n)?;
            if implements(plugin.as_ref()) {
                list.push((plugin, weight.unwrap_or(1)));
            }
        }
        for e in &set.enabled {
            let plugin = instance(&e.name)?;
            if !implements(plugin.as_ref()) {
                return Err(invalid(format!("plugin \"{}\" does not extend {point} plugin", e.name)));
            }
            let default_weight = multi.iter().find(|(n, _)| *n == e.name).and_then(|(_, w)| *w);
            let weight = e.weight.or(default_weight).unwrap_or(1);
            if point == "score" && !(1..=100).contains(&weight) {
                return Err(invalid(format!(
                    "score plugin \"{}\" weight {weight} must be in 1..=100",
                    e.name
                )));
            }
            list.push((plugin, weight));
        }
        let plain = || list.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
        match point {
            "queueSort" => {
                let names: Vec<&str> = list.iter().map(|(p, _)| p.name()).collect();
                if names != [plugins::priority_sort::NAME] {
                    return Err(invalid(format!(
                        "queueSort: exactly one plugin (PrioritySort) must be enabled, got {names:?}"
                    )));
                }
            }
            "preEnqueue" => profile.pre_enqueue = plain(),
            "preFilter" => profile.pre_filter = plain(),
            "filter" => profile.filter = plain(),
            "postFilter" => profile.post_filter = plain(),
            "preScore" => profile.pre_score = plain(),
            "score" => profile.score = list.clone(),
            "reserve" => profile.reserve = plain(),
            "permit" => profile.permit = plain(),
            "preBind" => profile.pre_bind = plain(),
            "bind" => {
                if list.is_empty() {
                    return Err(invalid("bind: at least one bind plugin is needed".into()));
                }
                profile.bind = plain();
            }
            _ => profile.post_bind = plain(),
        }
    }
    profile.all = instances.into_values().map(|p| (p.name(), p)).collect();
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_decoding_and_validation() {
        let bad: Result<File, _> = serde_yaml::from_str(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nbogus: 1\n",
        );
        assert!(bad.is_err());
        let file: File = serde_yaml::from_str(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: 150\n",
        )
        .unwrap();
        assert!(Config::from_parsed(file).is_err());
    }

    #[test]
    fn merge_keeps_defaults_and_applies_user_lists() {
        let defaults = vec![("A".to_string(), Some(1)), ("B".to_string(), Some(2))];
        let set: PluginSet =
            serde_yaml::from_str("enabled: [{name: B, weight: 5}, {name: C}]\ndisabled: [{name: A}]")
                .unwrap();
        assert_eq!(merge(&defaults, &set), vec![("B".to_string(), Some(5)), ("C".to_string(), None)]);
        let all: PluginSet = serde_yaml::from_str("disabled: [{name: '*'}]").unwrap();
        assert!(merge(&defaults, &all).is_empty());
    }
}
