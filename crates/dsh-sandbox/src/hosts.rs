//! The hosts a command may reach under the network policy `allow`: an
//! allow-list and a deny-list of [`HostPattern`]s (deny wins), checked by
//! the server's proxy against the host a command names (the `CONNECT`
//! line, an absolute URL, a SOCKS5 request), never against what the
//! command prints.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One entry of an allow- or deny-list: `files.example.org` (that host
/// exactly), `*.example.org` (its subdomains, not the apex), an IP literal
/// (`127.0.0.1`, `[::1]`), each with an optional `:port` (any port
/// without one).
///
/// Refused, with a reason: an empty pattern, `*`, a wildcard over one
/// label (`*.com`, `*.localhost`: a whole top-level domain), a `*`
/// anywhere but a leading `*.`, and names that are not host names.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPattern {
    name: HostName,
    port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum HostName {
    /// One host, lowercase, without a trailing dot.
    Exact(String),
    /// Every subdomain of this suffix (not the suffix itself).
    Subdomains(String),
    /// An IP literal.
    Ip(IpAddr),
}

/// A string that is not a usable [`HostPattern`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("host pattern \"{given}\" {reason}; expected a host (files.example.org), its subdomains (*.example.org) or an IP literal (127.0.0.1, [::1]), each with an optional :port")]
pub struct ParseHostError {
    given: String,
    reason: &'static str,
}

impl HostPattern {
    /// True if this pattern matches `host` (lowercase, no trailing dot, no
    /// brackets) on `port`.
    fn matches(&self, host: &str, ip: Option<IpAddr>, port: u16) -> bool {
        if self.port.is_some_and(|own| own != port) {
            return false;
        }
        match &self.name {
            HostName::Exact(name) => name == host,
            HostName::Subdomains(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            HostName::Ip(own) => ip == Some(*own),
        }
    }

    /// True if the pattern names its host literally: an IP literal, or
    /// `localhost` itself. Only such a pattern lets the proxy connect to a
    /// loopback, link-local or private address.
    pub fn is_literal(&self) -> bool {
        match &self.name {
            HostName::Ip(_) => true,
            HostName::Exact(name) => name == "localhost",
            HostName::Subdomains(_) => false,
        }
    }
}

fn refuse(given: &str, reason: &'static str) -> ParseHostError {
    ParseHostError {
        given: given.into(),
        reason,
    }
}

/// Splits `host[:port]`, `[v6][:port]` and a bare IPv6 literal.
fn split_port(given: &str) -> Result<(&str, Option<&str>), ParseHostError> {
    if let Some(rest) = given.strip_prefix('[') {
        let (host, tail) = rest
            .split_once(']')
            .ok_or_else(|| refuse(given, "has an unclosed ["))?;
        return match tail {
            "" => Ok((host, None)),
            _ => tail
                .strip_prefix(':')
                .map(|port| (host, Some(port)))
                .ok_or_else(|| refuse(given, "has text after ]")),
        };
    }
    match given.matches(':').count() {
        0 => Ok((given, None)),
        1 => Ok(given
            .split_once(':')
            .map(|(host, port)| (host, Some(port)))
            .unwrap_or((given, None))),
        _ => Ok((given, None)),
    }
}

fn valid_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl FromStr for HostPattern {
    type Err = ParseHostError;

    fn from_str(given: &str) -> Result<Self, Self::Err> {
        let trimmed = given.trim();
        if trimmed.is_empty() {
            return Err(refuse(given, "is empty"));
        }
        let (host, port) = split_port(trimmed)?;
        let port = match port {
            None => None,
            Some(port) => match port.parse::<u16>() {
                Ok(0) | Err(_) => return Err(refuse(given, "has a port that is not 1 to 65535")),
                Ok(port) => Some(port),
            },
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(HostPattern {
                name: HostName::Ip(ip),
                port,
            });
        }
        if host == "*" {
            return Err(refuse(given, "allows every host"));
        }
        let (bare, subdomains) = match host.strip_prefix("*.") {
            Some(suffix) if !suffix.contains('.') => {
                return Err(refuse(given, "allows a whole top-level domain"))
            }
            Some(suffix) => (suffix, true),
            None => (host.as_str(), false),
        };
        if bare.contains('*') {
            return Err(refuse(given, "has a * other than a leading *."));
        }
        if !valid_name(bare) {
            return Err(refuse(given, "is not a host name"));
        }
        let name = if subdomains {
            HostName::Subdomains(bare.to_owned())
        } else {
            HostName::Exact(bare.to_owned())
        };
        Ok(HostPattern { name, port })
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.name, self.port) {
            (HostName::Exact(name), _) => f.write_str(name)?,
            (HostName::Subdomains(suffix), _) => write!(f, "*.{suffix}")?,
            (HostName::Ip(IpAddr::V6(ip)), Some(_)) => write!(f, "[{ip}]")?,
            (HostName::Ip(ip), _) => write!(f, "{ip}")?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

impl Serialize for HostPattern {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HostPattern {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A named list of hosts an operator can opt into (`--allow-preset pypi`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum HostPreset {
    /// The Python Package Index: `pypi.org`, `files.pythonhosted.org`.
    Pypi,
    /// The npm registry: `registry.npmjs.org`, `registry.yarnpkg.com`.
    Npm,
    /// crates.io: `crates.io`, `index.crates.io`, `static.crates.io`.
    Crates,
    /// GitHub over HTTPS: `github.com`, `api.github.com`,
    /// `codeload.github.com` and the `githubusercontent.com` hosts of raw
    /// files, release assets and LFS objects.
    Github,
}

impl HostPreset {
    /// Every preset.
    pub const ALL: [HostPreset; 4] = [
        HostPreset::Pypi,
        HostPreset::Npm,
        HostPreset::Crates,
        HostPreset::Github,
    ];

    /// The stable name (`pypi`, `npm`, `crates`, `github`).
    pub fn as_str(self) -> &'static str {
        match self {
            HostPreset::Pypi => "pypi",
            HostPreset::Npm => "npm",
            HostPreset::Crates => "crates",
            HostPreset::Github => "github",
        }
    }

    /// The hosts it allows, on port 443.
    pub fn hosts(self) -> &'static [&'static str] {
        match self {
            HostPreset::Pypi => &["pypi.org", "files.pythonhosted.org"],
            HostPreset::Npm => &["registry.npmjs.org", "registry.yarnpkg.com"],
            HostPreset::Crates => &["crates.io", "index.crates.io", "static.crates.io"],
            HostPreset::Github => &[
                "github.com",
                "api.github.com",
                "codeload.github.com",
                "raw.githubusercontent.com",
                "objects.githubusercontent.com",
                "release-assets.githubusercontent.com",
                "github-cloud.githubusercontent.com",
            ],
        }
    }

    /// Its hosts as patterns (each on port 443).
    pub fn patterns(self) -> Vec<HostPattern> {
        self.hosts()
            .iter()
            .map(|host| HostPattern {
                name: HostName::Exact((*host).to_owned()),
                port: Some(443),
            })
            .collect()
    }
}

impl fmt::Display for HostPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for HostPreset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HostPreset::ALL
            .into_iter()
            .find(|preset| preset.as_str() == s)
            .ok_or_else(|| {
                format!("unknown host preset \"{s}\": expected pypi, npm, crates or github")
            })
    }
}

/// What the proxy decides about one host and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostVerdict {
    /// On the allow-list and not on the deny-list; `literal` when an
    /// allowing pattern names it literally (see
    /// [`HostPattern::is_literal`]), which alone permits loopback and
    /// private addresses.
    Allowed {
        /// Named literally by an allowing pattern.
        literal: bool,
    },
    /// On no allow-list entry (a grant of the host could let it through).
    Refused,
    /// On the deny-list: refused whatever is allowed.
    Denied,
}

/// The allow- and deny-lists of the network policy `allow`. Deny wins; an
/// empty allow-list refuses everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRules {
    /// Hosts a command may reach.
    #[serde(default)]
    pub allow: Vec<HostPattern>,
    /// Hosts it may not, whatever `allow` says.
    #[serde(default)]
    pub deny: Vec<HostPattern>,
}

impl HostRules {
    /// What the rules say of `host` (a name or an IP literal, brackets
    /// allowed) on `port`.
    pub fn verdict(&self, host: &str, port: u16) -> HostVerdict {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let ip = host.parse::<IpAddr>().ok();
        if self.deny.iter().any(|p| p.matches(&host, ip, port)) {
            return HostVerdict::Denied;
        }
        let mut allowing = self.allow.iter().filter(|p| p.matches(&host, ip, port));
        match allowing.next() {
            None => HostVerdict::Refused,
            Some(first) => HostVerdict::Allowed {
                literal: first.is_literal() || allowing.any(HostPattern::is_literal),
            },
        }
    }

    /// True if a deny-list entry names the address `ip` (checked against
    /// what an allowed name resolves to, so a denied address is not
    /// reached under another name).
    pub fn denies_address(&self, ip: IpAddr, port: u16) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            IpAddr::V4(_) => ip,
        };
        self.deny.iter().any(|p| p.matches("", Some(ip), port))
    }

    /// These rules with `extra` allowed as well (a person approved them for
    /// one call); the deny-list still wins.
    pub fn widened(&self, extra: &[HostPattern]) -> HostRules {
        let mut rules = self.clone();
        for pattern in extra {
            if !rules.allow.contains(pattern) {
                rules.allow.push(pattern.clone());
            }
        }
        rules
    }
}

/// True for addresses a proxy must not reach for a name it resolved:
/// loopback, link-local, private (RFC 1918, CGNAT, unique local),
/// unspecified, multicast and broadcast, IPv4-mapped ones included.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                // 100.64/10 (carrier-grade NAT), 198.18/15 (benchmarking),
                // 192.0.0/24 (protocol assignments), 240/4 (reserved and
                // the broadcast address), 0/8.
                || (a == 100 && (64..128).contains(&b))
                || (a == 198 && (b & 0xfe) == 18)
                || (a == 192 && b == 0 && c == 0)
                || a >= 240
                || a == 0
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal(IpAddr::V4(v4));
            }
            let seg = v6.segments();
            // 64:ff9b::/96, NAT64 of the embedded IPv4 address.
            if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [hi, lo] = [seg[6], seg[7]];
                let v4 = std::net::Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
                return is_internal(IpAddr::V4(v4));
            }
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // 64:ff9b:1::/48 (local-use NAT64), fc00::/7 (unique
                // local), fe80::/10 (link-local), fec0::/10 (site-local).
                || seg[..3] == [0x64, 0xff9b, 1]
                || (seg[0] & 0xfe00) == 0xfc00
                || (seg[0] & 0xffc0) == 0xfe80
                || (seg[0] & 0xffc0) == 0xfec0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &[&str], deny: &[&str]) -> HostRules {
        let parse = |list: &[&str]| list.iter().map(|p| p.parse().unwrap()).collect();
        HostRules {
            allow: parse(allow),
            deny: parse(deny),
        }
    }

    #[test]
    fn patterns_parse_print_and_refuse_what_is_too_broad() {
        for (given, shown) in [
            ("files.example.org", "files.example.org"),
            ("Files.Example.ORG.", "files.example.org"),
            ("*.example.org:443", "*.example.org:443"),
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("[::1]:443", "[::1]:443"),
            ("::1", "::1"),
            ("localhost", "localhost"),
        ] {
            let pattern: HostPattern = given.parse().unwrap();
            assert_eq!(pattern.to_string(), shown, "{given}");
            assert_eq!(pattern.to_string().parse::<HostPattern>().unwrap(), pattern);
        }
        for (given, reason) in [
            ("", "is empty"),
            ("  ", "is empty"),
            ("*", "allows every host"),
            ("*:443", "allows every host"),
            ("*.com", "allows a whole top-level domain"),
            ("*.localhost", "allows a whole top-level domain"),
            ("a.*.example.org", "has a * other than a leading *."),
            ("*example.org", "has a * other than a leading *."),
            ("exa mple.org", "is not a host name"),
            ("http://example.org", "has a port that is not 1 to 65535"),
            ("example.org:0", "has a port that is not 1 to 65535"),
            ("example.org:99999", "has a port that is not 1 to 65535"),
            ("[::1", "has an unclosed ["),
        ] {
            let err = given.parse::<HostPattern>().unwrap_err().to_string();
            assert!(err.contains(reason), "{given}: {err}");
            assert!(err.contains("expected a host"), "{err}");
        }
    }

    #[test]
    fn deny_wins_subdomains_exclude_the_apex_and_ports_bind() {
        let list = rules(
            &[
                "*.example.org",
                "pypi.org:443",
                "127.0.0.1:8080",
                "localhost",
            ],
            &["evil.example.org"],
        );
        let allowed = |host, port| matches!(list.verdict(host, port), HostVerdict::Allowed { .. });
        assert!(allowed("files.example.org", 443));
        assert!(allowed("a.b.example.org", 80));
        assert!(allowed("FILES.example.org.", 443));
        assert!(!allowed("example.org", 443), "the apex is not a subdomain");
        assert!(!allowed("badexample.org", 443));
        assert!(!allowed("evil.example.org", 443), "deny wins");
        assert_eq!(list.verdict("evil.example.org", 443), HostVerdict::Denied);
        assert!(allowed("pypi.org", 443));
        assert!(!allowed("pypi.org", 80));
        assert_eq!(
            list.verdict("127.0.0.1", 8080),
            HostVerdict::Allowed { literal: true }
        );
        assert_eq!(list.verdict("127.0.0.1", 8081), HostVerdict::Refused);
        assert_eq!(
            list.verdict("localhost", 5432),
            HostVerdict::Allowed { literal: true }
        );
        assert_eq!(
            list.verdict("files.example.org", 443),
            HostVerdict::Allowed { literal: false }
        );
        assert_eq!(
            HostRules::default().verdict("pypi.org", 443),
            HostVerdict::Refused
        );
        let wider = list.widened(&["example.org".parse().unwrap()]);
        assert!(matches!(
            wider.verdict("example.org", 1),
            HostVerdict::Allowed { .. }
        ));
        assert_eq!(wider.verdict("evil.example.org", 1), HostVerdict::Denied);
        let by_address = rules(&["*.example.org"], &["10.0.0.5", "[::1]:443"]);
        assert!(by_address.denies_address("10.0.0.5".parse().unwrap(), 80));
        assert!(by_address.denies_address("::ffff:10.0.0.5".parse().unwrap(), 80));
        assert!(by_address.denies_address("::1".parse().unwrap(), 443));
        assert!(!by_address.denies_address("::1".parse().unwrap(), 80));
        assert!(!by_address.denies_address("10.0.0.6".parse().unwrap(), 80));
    }

    #[test]
    fn internal_addresses_are_recognised() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "198.18.0.1",
            "198.19.255.255",
            "192.0.0.8",
            "240.0.0.1",
            "255.255.255.255",
            "64:ff9b::7f00:1",
            "64:ff9b::a00:1",
            "64:ff9b:1::1",
            "fec0::1",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for external in [
            "93.184.216.34",
            "2606:2800:220:1::1",
            "100.128.0.1",
            "198.20.0.1",
            "192.0.2.1",
            "64:ff9b::5db8:d822",
        ] {
            assert!(!is_internal(external.parse().unwrap()), "{external}");
        }
    }

    #[test]
    fn presets_are_named_and_on_port_443() {
        for preset in HostPreset::ALL {
            assert_eq!(preset.as_str().parse::<HostPreset>(), Ok(preset));
            let patterns = preset.patterns();
            assert_eq!(patterns.len(), preset.hosts().len());
            assert!(patterns
                .iter()
                .all(|p| p.port == Some(443) && !p.is_literal()));
        }
        assert!("pip"
            .parse::<HostPreset>()
            .unwrap_err()
            .contains("expected pypi"));
    }
}
