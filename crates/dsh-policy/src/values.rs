//! Values a flag or the policy file gives the same way: limits (a number,
//! or `none`), sizes (`256M`, `1.5G`), CPUs.

/// A limit: a value, or `none` for no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit(pub Option<u64>);

impl Limit {
    /// The tighter of two limits (a value beats `none`).
    pub fn min(self, other: Limit) -> Limit {
        match (self.0, other.0) {
            (Some(a), Some(b)) => Limit(Some(a.min(b))),
            (Some(a), None) | (None, Some(a)) => Limit(Some(a)),
            (None, None) => Limit(None),
        }
    }

    /// True if `self` allows more than `other`.
    pub fn is_looser_than(self, other: Limit) -> bool {
        match (self.0, other.0) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(a), Some(b)) => a > b,
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(n) => write!(f, "{n}"),
            None => f.write_str("none"),
        }
    }
}

fn none_or(
    value: &str,
    parse: impl FnOnce(&str) -> Option<u64>,
    expected: &str,
) -> Result<Limit, String> {
    if value.trim().eq_ignore_ascii_case("none") {
        return Ok(Limit(None));
    }
    match parse(value.trim()) {
        Some(n) if n > 0 => Ok(Limit(Some(n))),
        _ => Err(format!(
            "expected {expected}, or none for no limit; got {value:?}"
        )),
    }
}

/// A number of processes, or `none`.
pub fn limit_count(value: &str) -> Result<Limit, String> {
    none_or(
        value,
        |v| v.parse().ok(),
        "a positive number of processes (e.g. 200)",
    )
}

/// Bytes from `256M`, `1.5G`, `512k`, `8GiB` or a plain number.
pub fn parse_size(value: &str) -> Option<u64> {
    let upper = value.to_ascii_uppercase();
    let trimmed = upper.trim_end_matches("IB").trim_end_matches('B');
    let (number, shift) = match trimmed.chars().last()? {
        'K' => (&trimmed[..trimmed.len() - 1], 10),
        'M' => (&trimmed[..trimmed.len() - 1], 20),
        'G' => (&trimmed[..trimmed.len() - 1], 30),
        'T' => (&trimmed[..trimmed.len() - 1], 40),
        _ => (trimmed, 0),
    };
    let number: f64 = number.trim().parse().ok()?;
    let bytes = number * (1u64 << shift) as f64;
    (bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// A size, or `none`.
pub fn limit_size(value: &str) -> Result<Limit, String> {
    none_or(
        value,
        parse_size,
        "a size in bytes or with K, M, G or T (e.g. 256M, 1.5G)",
    )
}

/// CPUs as millicores (`0.5` is 500), or `none`.
pub fn limit_cpus(value: &str) -> Result<Limit, String> {
    let millicores = |v: &str| {
        let cpus: f64 = v.parse().ok()?;
        let millicores = (cpus * 1000.0).round();
        (cpus.is_finite() && millicores >= 1.0 && millicores <= f64::from(u32::MAX))
            .then_some(millicores as u64)
    };
    none_or(
        value,
        millicores,
        "a positive number of CPUs (e.g. 0.5 or 2)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_counts_and_cpus() {
        assert_eq!(limit_size("1.5G"), Ok(Limit(Some(3 << 29))));
        assert_eq!(limit_size("none"), Ok(Limit(None)));
        assert!(limit_size("lots").is_err());
        assert_eq!(limit_count("200"), Ok(Limit(Some(200))));
        assert!(limit_count("0").is_err());
        assert_eq!(limit_cpus("0.5"), Ok(Limit(Some(500))));
        assert!(Limit(None).is_looser_than(Limit(Some(1))));
        assert!(!Limit(Some(1)).is_looser_than(Limit(None)));
        assert_eq!(Limit(Some(5)).min(Limit(None)), Limit(Some(5)));
    }
}
