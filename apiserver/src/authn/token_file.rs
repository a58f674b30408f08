//! Static bearer tokens (`--token-auth-file`, upstream's CSV format
//! `token,user,uid,"group1,group2"`) and anonymous requests when `--anonymous-auth`
//! allows them.

use std::collections::HashMap;
use std::path::Path;

use http::HeaderMap;

use super::User;
use crate::errors::{ApiError, ApiResult};

#[derive(Default)]
pub struct Authenticator {
    tokens: HashMap<String, User>,
    pub anonymous: bool,
}

impl Authenticator {
    pub fn new(token_file: Option<&Path>, anonymous: bool) -> Result<Self, String> {
        let mut tokens = HashMap::new();
        if let Some(path) = token_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--token-auth-file {}: {e}", path.display()))?;
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let fields = split_csv(line);
                if fields.len() < 3 {
                    return Err(format!(
                        "--token-auth-file {} line {}: want token,user,uid[,groups]",
                        path.display(),
                        i + 1
                    ));
                }
                let groups = fields
                    .get(3)
                    .map(|g| g.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
                    .unwrap_or_default();
                tokens.insert(
                    fields[0].clone(),
                    User { name: fields[1].clone(), uid: fields[2].clone(), groups, ..Default::default() },
                );
            }
        }
        Ok(Self { tokens, anonymous })
    }

    /// Who sent the request; 401 for a bad token, or no credentials when anonymous
    /// requests are off.
    pub fn authenticate(&self, headers: &HeaderMap) -> ApiResult<User> {
        let token = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(str::trim);
        match token {
            Some(t) => self.tokens.get(t).cloned().ok_or_else(ApiError::unauthorized),
            None if self.anonymous => Ok(User {
                name: "system:anonymous".into(),
                uid: String::new(),
                groups: vec!["system:unauthenticated".into()],
                ..Default::default()
            }),
            None => Err(ApiError::unauthorized()),
        }
    }
}

/// Splits one CSV line, honouring double quotes.
fn split_csv(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur).trim().to_string()),
            _ => cur.push(c),
        }
    }
    out.push(cur.trim().to_string());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens.csv");
        std::fs::write(&f, "secret,admin,1,\"system:masters,dev\"\n").unwrap();
        let a = Authenticator::new(Some(&f), false).unwrap();
        let mut h = HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, "Bearer secret".parse().unwrap());
        let u = a.authenticate(&h).unwrap();
        assert_eq!((u.name.as_str(), u.groups.len()), ("admin", 2));
        h.insert(http::header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        assert_eq!(a.authenticate(&h).unwrap_err().code, 401);
        assert_eq!(a.authenticate(&HeaderMap::new()).unwrap_err().code, 401);
    }
}
