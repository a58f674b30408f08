//! Static bearer tokens (`--token-auth-file`, upstream's `tokenfile` authenticator): a
//! CSV file of `token,user,uid[,"group1,group2"]` lines, read once at startup.

use std::collections::HashMap;
use std::path::Path;

use super::{Authenticated, User, Verdict};

#[derive(Default)]
pub struct TokenFile {
    tokens: HashMap<String, User>,
}

impl TokenFile {
    /// Reads the file; no file means no static tokens.
    pub fn load(path: Option<&Path>) -> Result<Self, String> {
        let Some(path) = path else { return Ok(Self::default()) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--token-auth-file {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("token file '{}' {e}", path.display()))
    }

    fn parse(text: &str) -> Result<Self, String> {
        let mut tokens = HashMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields = split_csv(line);
            if fields.len() < 3 {
                return Err(format!(
                    "must have at least 3 columns (token, user name, user uid), found {}",
                    fields.len()
                ));
            }
            if fields[0].is_empty() {
                tracing::warn!("--token-auth-file: skipping a line with an empty token");
                continue;
            }
            let groups = fields
                .get(3)
                .map(|g| g.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
                .unwrap_or_default();
            let user = User { name: fields[1].clone(), uid: fields[2].clone(), groups, ..Default::default() };
            if tokens.insert(fields[0].clone(), user).is_some() {
                tracing::warn!(user = %fields[1], "--token-auth-file: duplicate token, the last line wins");
            }
        }
        Ok(Self { tokens })
    }

    pub fn authenticate(&self, token: &str) -> Verdict {
        match self.tokens.get(token) {
            Some(user) => Verdict::Authenticated(Authenticated { user: user.clone(), audiences: Vec::new() }),
            None => Verdict::NotMine,
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
        let f = TokenFile::parse("# comment\nsecret,admin,1,\"system:masters,dev\"\nother,bob,2\n").unwrap();
        let Verdict::Authenticated(a) = f.authenticate("secret") else { panic!("not authenticated") };
        assert_eq!((a.user.name.as_str(), a.user.uid.as_str(), a.user.groups.len()), ("admin", "1", 2));
        assert_eq!(f.authenticate("nope"), Verdict::NotMine);
        assert!(TokenFile::parse("a,b\n").err().unwrap().contains("at least 3 columns"));
    }
}
