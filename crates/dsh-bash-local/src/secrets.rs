//! Credentials recognised by their value, not only by their variable's
//! name: a URL with a password in its userinfo, a connection string with
//! a password, and the well-known token shapes (GitHub, GitLab, Slack,
//! AWS, Google, OpenAI and Anthropic, Stripe, JWTs, PEM private keys).

/// True if `value` carries a credential.
pub(crate) fn carries_credential(value: &str) -> bool {
    url_with_password(value)
        || connection_string_password(value)
        || value.contains("PRIVATE KEY-----")
        || value
            .split(|c: char| c.is_whitespace() || "\"'=,;()<>[]{}".contains(c))
            .any(token_shaped)
}

/// `scheme://user:password@host…` with a non-empty password, anywhere in
/// the value (a list of URLs too).
fn url_with_password(value: &str) -> bool {
    value.match_indices("://").any(|(at, _)| {
        let rest = &value[at + 3..];
        let authority = rest.split(['/', '?', '#', ' ', ',']).next().unwrap_or("");
        authority.rsplit_once('@').is_some_and(|(userinfo, _)| {
            userinfo.split_once(':').is_some_and(|(_, password)| !password.is_empty())
        })
    })
}

/// `…;Password=…` or `pwd=…` (ADO.NET, ODBC, JDBC-style options).
fn connection_string_password(value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    lower
        .split([';', '&', '?', ' '])
        .filter_map(|part| part.trim().split_once('='))
        .any(|(key, secret)| matches!(key.trim(), "password" | "pwd") && !secret.trim().is_empty())
}

/// The token shapes providers publish (prefix, then enough of the right
/// characters), checked on one word of a value.
fn token_shaped(word: &str) -> bool {
    let alnum = |s: &str, min: usize| {
        s.len() >= min && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let prefixed = |prefix: &str, min: usize| word.strip_prefix(prefix).is_some_and(|rest| alnum(rest, min));
    ["ghp_", "gho_", "ghu_", "ghs_", "ghr_"].iter().any(|p| prefixed(p, 30))
        || prefixed("github_pat_", 30)
        || prefixed("glpat-", 20)
        || ["xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-"].iter().any(|p| prefixed(p, 10))
        || aws_key(word)
        || prefixed("AIza", 35)
        || prefixed("sk-", 20)
        || prefixed("sk_live_", 16)
        || prefixed("rk_live_", 16)
        || jwt(word)
}

/// `AKIA` or `ASIA` and 16 upper-case letters or digits.
fn aws_key(word: &str) -> bool {
    ["AKIA", "ASIA"].iter().any(|prefix| {
        word.strip_prefix(prefix).is_some_and(|rest| {
            rest.len() == 16 && rest.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        })
    })
}

/// Three base64url segments, the first a JSON header (`eyJ`).
fn jwt(word: &str) -> bool {
    let segments: Vec<&str> = word.split('.').collect();
    segments.len() == 3
        && word.starts_with("eyJ")
        && segments.iter().all(|s| {
            s.len() >= 4 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_recognised_by_value() {
        for secret in [
            "postgres://u:hunter2@db/x",
            "http://u:pw@proxy:3128",
            "https://a.example, https://bob:s3cret@b.example/path",
            "Server=db;Database=x;User Id=u;Password=p4ss;",
            "DRIVER={x};UID=u;PWD=p4ss",
            "ghp_0123456789abcdefghijklmnopqrstuvwxyz",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
            "gho_0123456789abcdefghijklmnopqrstuvwxyz",
            "glpat-0123456789abcdefghij",
            "xoxb-1234567890-abcdef",
            "AKIAIOSFODNN7EXAMPLE",
            "ASIAIOSFODNN7EXAMPLE",
            "AIzaSyA0123456789abcdefghijklmnopqrstuv",
            "sk-ant-api03-0123456789abcdefghij",
            "sk-proj-0123456789abcdefghijklmn",
            "sk_live_0123456789abcdef",
            "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlX2hlcmU",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIE...\n-----END RSA PRIVATE KEY-----",
            "--token=ghp_0123456789abcdefghijklmnopqrstuvwxyz",
        ] {
            assert!(carries_credential(secret), "{secret}");
        }
        for plain in [
            "/usr/local/bin:/usr/bin",
            "https://example.org/a:b@c",
            "http://user@proxy:3128",
            "postgres://db.example/x",
            "en_US.UTF-8",
            "sk-short",
            "AKIAlower0123456789",
            "a.b.c",
            "Password=",
            "xterm-256color",
            "ghp_short",
        ] {
            assert!(!carries_credential(plain), "{plain}");
        }
    }
}
