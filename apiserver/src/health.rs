//! `/healthz`, `/livez` and `/readyz` with upstream's check lists: `ok`, or a 500 listing
//! `[+]check ok` / `[-]check failed`; `?verbose` lists every check; `/readyz/<check>`
//! runs one.

use http::StatusCode;

use crate::errors::ApiResult;
use crate::handlers::{Api, BoxBody, full};

async fn run_check(api: &Api, name: &str) -> bool {
    match name {
        "ping" | "log" | "poststarthook/start-apiextensions-informers" => true,
        "etcd" | "etcd-readiness" => {
            tokio::time::timeout(std::time::Duration::from_secs(2), api.etcd.current_revision())
                .await
                .is_ok_and(|r| r.is_ok())
        }
        "informer-sync" => api.registry.stores.iter().all(|s| s.cacher.rv() > 0),
        "poststarthook/bootstrap-controller" => {
            api.registry.core("namespaces").cacher.get("default").is_some()
        }
        _ => false,
    }
}

fn checks(endpoint: &str) -> &'static [&'static str] {
    match endpoint {
        "readyz" => {
            &["ping", "log", "etcd", "etcd-readiness", "informer-sync", "poststarthook/bootstrap-controller"]
        }
        _ => &["ping", "log", "etcd", "poststarthook/bootstrap-controller"],
    }
}

pub async fn respond(api: &Api, path: &str, query: &str) -> ApiResult<http::Response<BoxBody>> {
    let trimmed = path.trim_start_matches('/');
    let (endpoint, only) = match trimmed.split_once('/') {
        Some((e, c)) => (e, Some(c)),
        None => (trimmed, None),
    };
    let verbose = query.split('&').any(|p| p == "verbose" || p.starts_with("verbose="));
    let excluded: Vec<String> = url::form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "exclude")
        .map(|(_, v)| v.into_owned())
        .collect();
    if let Some(one) = only {
        if !checks(endpoint).contains(&one) {
            return Ok(full(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "404 page not found\n"));
        }
        return Ok(if run_check(api, one).await {
            full(StatusCode::OK, "text/plain; charset=utf-8", "ok")
        } else {
            full(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                format!("internal server error: {one} failed\n"),
            )
        });
    }
    let mut lines = Vec::new();
    let mut failed = false;
    for c in checks(endpoint) {
        if excluded.iter().any(|e| e == c) {
            lines.push(format!("[+]{c} excluded: ok"));
            continue;
        }
        if run_check(api, c).await {
            lines.push(format!("[+]{c} ok"));
        } else {
            failed = true;
            lines.push(format!("[-]{c} failed: reason withheld"));
        }
    }
    if failed {
        lines.push(format!("{endpoint} check failed"));
        return Ok(full(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain; charset=utf-8",
            lines.join("\n") + "\n",
        ));
    }
    if verbose {
        lines.push(format!("{endpoint} check passed"));
        return Ok(full(StatusCode::OK, "text/plain; charset=utf-8", lines.join("\n") + "\n"));
    }
    Ok(full(StatusCode::OK, "text/plain; charset=utf-8", "ok"))
}
