//! Group 12: what judging a command by the policy's rules costs (every
//! `bash` call pays it before anything runs).

use std::time::Instant;

use dsh_rules::{Decision, Rule, RuleWord, Rules};

use crate::measure::{Row, Stats};

/// 100 rules over 34 programs, as a policy that grew over months reads.
fn hundred_rules() -> Rules {
    let programs = [
        "git",
        "npm",
        "cargo",
        "rm",
        "curl",
        "wget",
        "docker",
        "kubectl",
        "terraform",
        "pip",
        "python",
        "node",
        "yarn",
        "pnpm",
        "make",
        "go",
        "gh",
        "aws",
        "gcloud",
        "az",
        "ssh",
        "scp",
        "rsync",
        "chmod",
        "chown",
        "dd",
        "mkfs",
        "mount",
        "systemctl",
        "brew",
        "apt",
        "helm",
        "psql",
        "mysql",
    ];
    let subcommands = ["push", "publish", "deploy"];
    let decisions = [Decision::Deny, Decision::Ask, Decision::Allow];
    let rules = (0..100)
        .map(|n| Rule {
            command: vec![
                RuleWord::One(programs[n % programs.len()].into()),
                RuleWord::One(subcommands[n % subcommands.len()].into()),
                RuleWord::One(format!("--flag-{n}")),
            ],
            decision: decisions[n % decisions.len()],
            reason: Some(format!("rule {n}")),
            origin: None,
            grants: None,
        })
        .collect();
    Rules::new(rules).unwrap_or_default()
}

/// Milliseconds per judgement of `command`, over `n` judgements, each of
/// a command of its own (a word differs: the parser's word cache is not
/// what is measured).
fn per_judgement(rules: &Rules, command: &str, n: usize) -> f64 {
    let commands: Vec<String> = (0..n)
        .map(|i| command.replace("{n}", &format!("x{i}y")))
        .collect();
    let started = Instant::now();
    for command in &commands {
        std::hint::black_box(rules.judge(std::hint::black_box(command)));
    }
    crate::measure::ms(started.elapsed()) / n as f64
}

/// The rows: a typical command, and one that nests a shell and
/// substitutions.
pub fn rules_rows(rounds: usize) -> Vec<Row> {
    let rules = hundred_rules();
    let cases = [
        ("12a judge a typical command against 100 rules", "cd crates/{n} && cargo test --workspace {n} 2>&1 | tail -n 50"),
        ("12b judge a nested command against 100 rules", "FOO={n} timeout 60 bash -c \"git status {n} && npm run build $(git rev-parse {n})\" > {n}.log"),
    ];
    cases
        .iter()
        .map(|(scenario, command)| {
            let _warm = per_judgement(&rules, command, 100);
            let samples = (0..rounds.max(1))
                .map(|_| per_judgement(&rules, command, 2000))
                .collect();
            Row {
                scenario: (*scenario).into(),
                ours: Stats::of(samples),
                baseline: None,
                unit: "ms",
                peak_rss_mib: None,
                note: "target < 0.1 ms per command".into(),
            }
        })
        .collect()
}
