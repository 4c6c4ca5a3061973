//! What several test files share: whether bubblewrap can run here.

/// True if bwrap runs a command here; otherwise says so and skips (fails
/// under `DSH_TEST_REQUIRE_SANDBOX=1`, as CI sets).
pub fn bwrap_or_skip(what: &str) -> bool {
    let usable = std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !usable {
        let required = std::env::var("DSH_TEST_REQUIRE_SANDBOX").is_ok_and(|v| v == "1");
        assert!(!required, "bwrap is required (DSH_TEST_REQUIRE_SANDBOX=1)");
        eprintln!("SKIP {what}: bwrap is unusable here");
    }
    usable
}
