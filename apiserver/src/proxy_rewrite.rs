//! Link rewriting for `pods/proxy`, `services/proxy` and `nodes/proxy` answers (upstream's
//! proxy `Transport` in apimachinery's `util/proxy`): a page served at the backend's `/x`
//! is seen by the client under `<prefix>/x`, so absolute-path links in an HTML answer and
//! the `Location` of a redirect get the proxy prefix, and the page still works through the
//! API server. Only uncompressed `text/html` bodies are rewritten (upstream also inflates
//! gzip and deflate ones); links to other hosts and relative links are left alone.

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use http_body_util::{BodyExt, Full};

use crate::handlers::BoxBody;

/// The largest HTML body rewritten; a larger one is passed on as it came.
const MAX_REWRITTEN_BODY: usize = 16 << 20;

/// Tag → attributes holding URLs (upstream's `atomsToAttrs`).
const URL_ATTRS: &[(&str, &[&str])] = &[
    ("a", &["href"]),
    ("applet", &["codebase"]),
    ("area", &["href"]),
    ("audio", &["src"]),
    ("base", &["href"]),
    ("blockquote", &["cite"]),
    ("body", &["background"]),
    ("button", &["formaction"]),
    ("command", &["icon"]),
    ("del", &["cite"]),
    ("embed", &["src"]),
    ("form", &["action"]),
    ("frame", &["longdesc", "src"]),
    ("head", &["profile"]),
    ("html", &["manifest"]),
    ("iframe", &["longdesc", "src"]),
    ("img", &["longdesc", "src", "usemap"]),
    ("input", &["src", "usemap", "formaction"]),
    ("ins", &["cite"]),
    ("link", &["href"]),
    ("object", &["classid", "codebase", "data", "usemap"]),
    ("q", &["cite"]),
    ("script", &["src"]),
    ("source", &["src"]),
    ("video", &["poster", "src"]),
];

/// `url` as the client must ask for it: an absolute path (on no host, or on `host`, the
/// API server's own) gets `prefix` in front unless it has it already.
pub fn rewrite_url(url: &str, prefix: &str, host: &str) -> String {
    let (rest, had_authority) = if let Some(after) = url.strip_prefix("//") {
        (after, true)
    } else if let Some(i) = url.find("://").filter(|&i| url[..i].chars().all(|c| c.is_ascii_alphanumeric())) {
        (&url[i + 3..], true)
    } else {
        (url, false)
    };
    let path_start = if had_authority {
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if &rest[..end] != host {
            return url.to_owned();
        }
        &rest[end..]
    } else {
        rest
    };
    if !path_start.starts_with('/') || path_start.starts_with(prefix) {
        return url.to_owned();
    }
    // A link naming the API server's own host keeps its scheme and host, as upstream's.
    let head = &url[..url.len() - path_start.len()];
    let prefix = prefix.trim_end_matches('/');
    format!("{head}{prefix}{path_start}")
}

/// Rewrites the URL attributes of every start tag in `html`, leaving all other bytes as
/// they are.
pub fn rewrite_html(html: &str, prefix: &str, host: &str) -> String {
    let mut out = String::with_capacity(html.len() + 64);
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        out.push_str(&rest[..lt]);
        rest = &rest[lt..];
        // Comments and declarations are copied whole.
        if rest.starts_with("<!--") {
            let end = rest.find("-->").map(|i| i + 3).unwrap_or(rest.len());
            out.push_str(&rest[..end]);
            rest = &rest[end..];
            continue;
        }
        let Some(gt) = tag_end(rest) else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rewrite_tag(&rest[..=gt], prefix, host));
        rest = &rest[gt + 1..];
    }
    out.push_str(rest);
    out
}

/// The index of the `>` closing the tag `s` starts (quotes respected).
fn tag_end(s: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices().skip(1) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '>') => return Some(i),
            _ => {}
        }
    }
    None
}

/// One tag `<name attr="v" ...>` with its URL attributes rewritten.
fn rewrite_tag(tag: &str, prefix: &str, host: &str) -> String {
    let inner = &tag[1..tag.len() - 1];
    let name_end = inner.find(|c: char| c.is_ascii_whitespace() || c == '/').unwrap_or(inner.len());
    let name = inner[..name_end].to_ascii_lowercase();
    let Some((_, attrs)) = URL_ATTRS.iter().find(|(t, _)| *t == name) else {
        return tag.to_owned();
    };
    let mut out = String::with_capacity(tag.len() + 64);
    out.push('<');
    out.push_str(&inner[..name_end]);
    let mut rest = &inner[name_end..];
    loop {
        // Whitespace and stray slashes between attributes.
        let skip = rest.find(|c: char| !(c.is_ascii_whitespace() || c == '/')).unwrap_or(rest.len());
        out.push_str(&rest[..skip]);
        rest = &rest[skip..];
        if rest.is_empty() {
            break;
        }
        let name_len =
            rest.find(|c: char| c.is_ascii_whitespace() || c == '=' || c == '/').unwrap_or(rest.len());
        let attr = rest[..name_len].to_ascii_lowercase();
        out.push_str(&rest[..name_len]);
        rest = &rest[name_len..];
        let ws = rest.find(|c: char| !c.is_ascii_whitespace()).unwrap_or(rest.len());
        if !rest[ws..].starts_with('=') {
            continue; // an attribute without a value
        }
        out.push_str(&rest[..=ws]);
        rest = &rest[ws + 1..];
        let ws = rest.find(|c: char| !c.is_ascii_whitespace()).unwrap_or(rest.len());
        out.push_str(&rest[..ws]);
        rest = &rest[ws..];
        let (value, quote, len) = match rest.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let end = rest[1..].find(q).map(|i| i + 1).unwrap_or(rest.len());
                (&rest[1..end], Some(q), (end + 1).min(rest.len()))
            }
            _ => {
                let end = rest.find(|c: char| c.is_ascii_whitespace()).unwrap_or(rest.len());
                (&rest[..end], None, end)
            }
        };
        let value =
            if attrs.contains(&attr.as_str()) { rewrite_url(value, prefix, host) } else { value.to_owned() };
        match quote {
            Some(q) => {
                out.push(q);
                out.push_str(&value);
                out.push(q);
            }
            None => out.push_str(&value),
        }
        rest = &rest[len..];
    }
    out.push('>');
    out
}

/// `resp` with its links and redirect rewritten for a client that asked under `prefix` on
/// `host` (the API server's address as the client named it).
pub async fn rewrite_response(resp: Response<BoxBody>, prefix: &str, host: &str) -> Response<BoxBody> {
    let (mut parts, body) = resp.into_parts();
    if parts.status.is_redirection()
        && let Some(loc) = parts.headers.get(header::LOCATION).and_then(|v| v.to_str().ok())
        && let Ok(v) = HeaderValue::from_str(&rewrite_url(loc, prefix, host))
    {
        parts.headers.insert(header::LOCATION, v);
    }
    let is_html =
        parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|ct| {
            ct.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case("text/html")
        });
    let encoded = parts
        .headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|e| !e.trim().is_empty() && !e.trim().eq_ignore_ascii_case("identity"));
    // Only a body of announced, bounded length is rewritten: a streamed one (a log tail,
    // say) passes through as it comes.
    let small = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .is_some_and(|n| n <= MAX_REWRITTEN_BODY);
    if !is_html || encoded || !small {
        return Response::from_parts(parts, body);
    }
    let mut body = body;
    let mut buf = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Ok(data) = f.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
            Err(e) => {
                // The backend failed mid-body: end the answer short, as a broken
                // proxied stream would.
                tracing::debug!(err = %e, "reading an HTML answer to rewrite");
                break;
            }
        }
        if buf.len() > MAX_REWRITTEN_BODY {
            break; // more than announced; what came is passed on below
        }
    }
    let bytes = buf.freeze();
    let rewritten = match std::str::from_utf8(&bytes) {
        Ok(text) => Bytes::from(rewrite_html(text, prefix, host)),
        Err(_) => bytes,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Full::new(rewritten).map_err(|never| match never {}).boxed_unsync())
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "/api/v1/namespaces/ns/pods/p:1080/proxy";

    #[test]
    fn absolute_paths_get_the_prefix() {
        assert_eq!(
            rewrite_html(r#"<a href="/rewriteme">test</a>"#, P, "h:6443"),
            format!(r#"<a href="{P}/rewriteme">test</a>"#)
        );
        assert_eq!(
            rewrite_html("<IMG alt='x' SRC='/i.png'/><script src=/s.js></script>", P, "h"),
            format!("<IMG alt='x' SRC='{P}/i.png'/><script src={P}/s.js></script>")
        );
    }

    #[test]
    fn other_links_and_text_are_untouched() {
        let html = r#"<!-- <a href="/c"> --><p class="/x">a > b</p><a href="rel/x">r</a><a href="http://other/x">o</a><a name=x>"#;
        assert_eq!(rewrite_html(html, P, "h"), html);
        assert_eq!(rewrite_html(&format!(r#"<a href="{P}/x">"#), P, "h"), format!(r#"<a href="{P}/x">"#));
    }

    #[test]
    fn urls() {
        assert_eq!(rewrite_url("/", P, "h"), format!("{P}/"));
        assert_eq!(rewrite_url("/a/b/?q=1#f", P, "h"), format!("{P}/a/b/?q=1#f"));
        assert_eq!(rewrite_url("https://h/a", P, "h"), format!("https://h{P}/a"));
        assert_eq!(rewrite_url("https://elsewhere/a", P, "h"), "https://elsewhere/a");
        assert_eq!(rewrite_url("a/b", P, "h"), "a/b");
    }
}
