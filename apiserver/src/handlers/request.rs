//! Parses a resource request's path and method into upstream's `RequestInfo`: API group,
//! version, namespace, resource, name, subresource and verb.

use http::Method;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: &'static str,
}

/// Parses `/api/v1/...` and `/apis/<group>/<version>/...` paths. None for anything else
/// (discovery roots are handled before this).
pub fn parse(method: &Method, path: &str, query_watch: bool) -> Option<RequestInfo> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest),
        _ => return None,
    };
    let mut rest: Vec<&str> = rest.to_vec();
    let mut watch_path = false;
    if rest.first() == Some(&"watch") {
        watch_path = true;
        rest.remove(0);
    }
    let mut info = RequestInfo { group, version, ..Default::default() };
    // namespaces/<ns>/<resource>... is namespaced, but namespaces/<name>[/sub] is the
    // namespace object itself.
    match rest.as_slice() {
        [] => return None,
        ["namespaces", ns, resource, tail @ ..]
            if !matches!(*resource, "status" | "finalize") || !tail.is_empty() =>
        {
            info.namespace = Some(ns.to_string());
            info.resource = resource.to_string();
            info.name = tail.first().map(|s| s.to_string());
            info.subresource = tail.get(1).map(|s| s.to_string());
            if tail.len() > 2 && !is_proxy(tail) {
                return None;
            }
        }
        [resource, tail @ ..] => {
            info.resource = resource.to_string();
            info.name = tail.first().map(|s| s.to_string());
            info.subresource = tail.get(1).map(|s| s.to_string());
            if tail.len() > 2 && !is_proxy(tail) {
                return None;
            }
        }
    }
    if info.resource.is_empty() || info.name.as_deref() == Some("") {
        return None;
    }
    info.verb = match (method, info.name.is_some()) {
        (&Method::GET | &Method::HEAD, _) if watch_path || query_watch => "watch",
        (&Method::GET | &Method::HEAD, true) => "get",
        (&Method::GET | &Method::HEAD, false) => "list",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        (&Method::OPTIONS, true) if info.subresource.as_deref() == Some("proxy") => "options",
        _ => return None,
    };
    Some(info)
}

/// `<name>/proxy/<path...>`: the path after `proxy` is the proxied one, not part of the
/// request info (upstream keeps only the subresource).
fn is_proxy(tail: &[&str]) -> bool {
    tail.get(1) == Some(&"proxy")
}

/// Upstream's long-running check (`LongRunningRequestCheck` with the kube-apiserver's
/// sets): watches and proxies, and the streaming subresources. These hold no in-flight
/// slot and have no request timeout.
pub fn is_long_running(info: &RequestInfo) -> bool {
    matches!(info.verb, "watch" | "proxy")
        || matches!(info.subresource.as_deref(), Some("attach" | "exec" | "proxy" | "log" | "portforward"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(m: Method, path: &str) -> RequestInfo {
        parse(&m, path, false).unwrap()
    }

    #[test]
    fn paths() {
        let r = p(Method::GET, "/api/v1/namespaces/default/pods/web");
        assert_eq!(
            (r.namespace.as_deref(), r.resource.as_str(), r.name.as_deref(), r.verb),
            (Some("default"), "pods", Some("web"), "get")
        );
        let r = p(Method::GET, "/apis/apps/v1/deployments");
        assert_eq!((r.group.as_str(), r.verb, r.namespace), ("apps", "list", None));
        let r = p(Method::PUT, "/apis/apps/v1/namespaces/x/deployments/d/scale");
        assert_eq!((r.subresource.as_deref(), r.verb), (Some("scale"), "update"));
        let r = p(Method::GET, "/api/v1/namespaces/kube-system");
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.namespace),
            ("namespaces", Some("kube-system"), None)
        );
        let r = p(Method::PUT, "/api/v1/namespaces/kube-system/finalize");
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref()),
            ("namespaces", Some("kube-system"), Some("finalize"))
        );
        let r = p(Method::GET, "/api/v1/watch/namespaces/default/pods");
        assert_eq!(r.verb, "watch");
        assert_eq!(parse(&Method::GET, "/api/v1/namespaces/default/pods", true).unwrap().verb, "watch");
        let r = p(Method::DELETE, "/api/v1/namespaces/default/configmaps");
        assert_eq!(r.verb, "deletecollection");
        assert!(parse(&Method::GET, "/healthz", false).is_none());
    }

    #[test]
    fn connect_paths() {
        let r = p(Method::GET, "/api/v1/nodes/n1/proxy/metrics/cadvisor");
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.subresource.as_deref(), r.verb),
            ("nodes", Some("n1"), Some("proxy"), "get")
        );
        assert!(is_long_running(&r));
        assert_eq!(p(Method::OPTIONS, "/api/v1/nodes/n1/proxy/").verb, "options");
        assert!(parse(&Method::OPTIONS, "/api/v1/nodes/n1", false).is_none());
        assert!(parse(&Method::GET, "/api/v1/namespaces/d/pods/p/status/x", false).is_none());
        let r = p(Method::POST, "/api/v1/namespaces/d/pods/p/exec");
        assert_eq!((r.subresource.as_deref(), r.verb), (Some("exec"), "create"));
        assert!(is_long_running(&r));
        let r = p(Method::GET, "/api/v1/namespaces/d/pods/p/log");
        assert_eq!((r.subresource.as_deref(), r.verb), (Some("log"), "get"));
        assert!(is_long_running(&r));
        assert!(!is_long_running(&p(Method::GET, "/api/v1/namespaces/d/pods/p")));
        assert!(is_long_running(&p(Method::GET, "/api/v1/watch/pods")));
    }
}
