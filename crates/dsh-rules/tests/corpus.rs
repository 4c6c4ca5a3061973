//! Bypass attempts against a deny rule on `git push` and one on `rm -rf`:
//! each form holds; dynamic forms ask; plain commands are allowed by an
//! allow rule; a compound command takes its strictest part.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use dsh_rules::{Decision, Rule, RuleWord, Rules, Verdict};

fn rule(words: &[&str], decision: Decision) -> Rule {
    Rule {
        command: words.iter().map(|w| RuleWord::One((*w).into())).collect(),
        decision,
        reason: Some(format!("{} says {decision}", words.join(" "))),
        origin: None,
        grants: None,
    }
}

fn rules() -> Rules {
    Rules::new(vec![
        rule(&["git", "push"], Decision::Deny),
        rule(&["rm", "-rf"], Decision::Deny),
        rule(&["npm", "publish"], Decision::Ask),
        rule(&["npm", "run", "test"], Decision::Allow),
        rule(&["ls"], Decision::Allow),
        rule(&["git", "status"], Decision::Allow),
    ])
    .unwrap()
}

fn check(forms: &[&str], expected: Verdict) {
    let rules = rules();
    let mut wrong = Vec::new();
    for form in forms {
        let judged = rules.judge(form);
        if judged.decision != expected {
            wrong.push(format!(
                "{form:?} → {:?} {:?}",
                judged.decision, judged.parts
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "expected {expected:?}:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn deny_holds_in_every_form() {
    check(
        &[
            "git push",
            "git push origin main",
            "ls; git push",
            "ls && git push",
            "false || git push",
            "ls | git push",
            "ls\ngit push",
            "ls\n\ngit push --force",
            "(git push)",
            "{ git push; }",
            "( (ls; git push) )",
            "( (git push) )",
            "((git push) )",
            "( (git push))",
            "((git push); (ls))",
            "( ( ( git push ) ) )",
            "((git push))",
            "(( $(git push) ))",
            "if true; then git push; fi",
            "if false; then :; elif git push; then :; else :; fi",
            "if false; then :; else git push; fi",
            "for i in 1 2; do git push; done",
            "for ((i=0;i<1;i++)); do git push; done",
            "while git push; do break; done",
            "until git push; do :; done",
            "case x in x) git push;; esac",
            "f() { git push; }; f",
            "function f { git push; }",
            "echo $(git push)",
            "echo `git push`",
            "echo \"$(git push)\"",
            "x=$(git push) ls",
            "x=$(git push)",
            "cat <(git push)",
            "ls > >(git push)",
            "diff <(ls) <(git push)",
            "echo ${x:-$(git push)}",
            "[[ $(git push) ]]",
            "bash -c 'git push'",
            "sh -c \"git push\"",
            "bash -lc 'git push'",
            "/bin/bash -e -c 'git push'",
            "bash -c \"sh -c 'git push'\"",
            "zsh -c 'ls; git push'",
            "bash <<EOF\ngit push\nEOF",
            "bash <<'EOF'\ngit push\nEOF",
            "sh <<< 'git push'",
            "cat <<EOF\n$(git push)\nEOF",
            "eval git push",
            "eval 'git push'",
            "eval \"git push\"",
            "env git push",
            "env -i FOO=1 git push",
            "timeout 10 git push",
            "timeout -k 5 10 git push",
            "nice -n 10 git push",
            "nohup git push",
            "command git push",
            "exec git push",
            "xargs git push < /dev/null",
            "sudo git push",
            "sudo -u root git push",
            "stdbuf -o0 git push",
            "time git push",
            "FOO=bar git push",
            "FOO=bar BAZ=1 git push",
            "env FOO=1 nice -n 1 timeout 5 nohup git push",
            "/usr/bin/git push",
            "./git push",
            "../bin/git push",
            "'git' 'push'",
            "\"git\" push",
            "g\\it pu\\sh",
            "gi''t pu\"\"sh",
            "\\git push",
            "$'git' push",
            "git push &",
            "git push & ls",
            "ls & git push &",
            "git push > /dev/null 2>&1",
            "git push 2>/dev/null",
            "< /dev/null git push",
            ">out git push",
            "git -C /tmp push",
            "git --no-pager push",
            "git -c core.x=1 push origin",
            "! git push",
            "time git push",
            "alias gp='git push'; gp",
            "alias g=git\ng push",
            "find . -exec git push \\;",
            "trap 'git push' EXIT",
            "watch git push",
            "su -c 'git push'",
            "busybox sh -c 'git push'",
            "rm -rf /tmp/x",
            "rm -fr /tmp/x",
            "rm -r -f /tmp/x",
            "rm -rfv /tmp/x",
            "rm -v -rf x",
            "/bin/rm -rf x",
            "ls && rm -rf x",
            "bash -c 'rm -rf x'",
            "sudo rm -rf /",
            "npm run test && git push",
            "npm run test; rm -rf x",
            // Found by an attack from outside (helper review, issue 37).
            "coproc git push",
            "true | coproc git push",
            "time -- git push",
            "time -p -- git push",
            "eval -- 'git push'",
            "command eval -- 'git push'",
            "trap -- 'git push' EXIT",
            "timeout -- 5 git push",
            "timeout -s KILL -- 5 rm -rf x",
            "env 'A B=1' git push",
            "env a.b=1 git push",
            "watch -x sh -c 'git push'",
            "find . -maxdepth 0 -exec rm + -rf x \\;",
            "su -c'git push'",
            "su --command='git push'",
            "su -lc 'git push'",
            "flock /tmp/l git push",
            "flock /tmp/l -c 'git push'",
            "chrt -o 0 git push",
            "taskset 1 git push",
            "unshare git push",
            "nsenter -t 1 git push",
            "setpriv --reuid=1 git push",
            "chroot / git push",
            "runuser -u root -- git push",
            "strace -o /dev/null git push",
            "fakeroot git push",
            "script -qc 'git push' /dev/null",
            "capsh -- -c 'git push'",
            "sg root -c 'git push'",
            "busybox hush -c 'git push'",
            "x='a[$(git push)]'; (( x ))",
            "[[ 'a[$(git push)]' -eq 0 ]]",
            "declare -i x='a[$(git push)]'",
            "a['$(git push)']=1",
            "a=(['$(git push)']=1)",
            "declare -a a=(['$(git push)']=1)",
            "PS4='$(git push)'; set -x; :",
            "mapfile -C 'git push' -c 1 <<< x",
            "readarray -C 'rm -rf' -c 1 <<< x",
            "compgen -C 'git push' x",
            "compgen -W '$(git push)' x",
            "bash <<EOF\ngit pu\\\\sh\nEOF",
            "cat <<EOF\n$\\\n(git push)\nEOF",
            "bash /dev/stdin <<< 'git push'",
            "alias git=true; git push",
            "fish -c 'git push'",
            "x='$(git push)'; echo \"${x@P}\"",
        ],
        Verdict::Deny,
    );
}

#[test]
fn attacks_found_from_outside_ask() {
    check(
        &[
            "echo 'git push' | su",
            "{git,'push'}",
            "{\"git\",push}",
            "{rm,-rf,'x'}",
            "echo \"${y@P}\"",
            "tmux new -d 'git push'",
            "hash -p /tmp/git ls; ls push",
            "BASH_CMDS[ls]=/tmp/git; ls push",
            "shopt -s expand_aliases\nBASH_ALIASES[x]='git push'\nx",
            "alias x='git ' p=push\nx p",
            "echo 'git push' | bash /dev/stdin",
            "bash 3<<<'git push' <<<'echo hi' <&3",
            "BASH_ENV=/dev/stdin bash -c : <<< 'git push'",
            "bash --rcfile <(echo 'git push') -i <<< ''",
            "PROMPT_COMMAND=\"$X\" bash -i <<< ''",
            "fc -s",
            "echo 'git push' | xargs -I % sh -c %",
            "find . -exec sh -c 'true {}' \\;",
            "script -q /dev/null",
            "env -\u{e9} x",
        ],
        Verdict::Ask,
    );
}

#[test]
fn an_allow_rule_stands_for_neither_a_path_nor_a_redirection() {
    check(
        &[
            "./npm run test",
            "/tmp/evil/npm run test",
            "LANG=C ls",
            "LD_PRELOAD=./x.so npm run test",
            "timeout 5 npm run test",
            "sudo ls",
            "env NODE_OPTIONS=--require=./x npm run test",
            "npm run test > ~/.bashrc",
            "{ npm run test; } >> ~/.profile",
        ],
        Verdict::Default,
    );
    check(
        &[
            "npm run test > /dev/null 2>&1",
            "npm run test & npm run test",
        ],
        Verdict::Allow,
    );
}

#[test]
fn many_nested_aliases_are_bounded() {
    let mut command = String::from("alias a0=:");
    for level in 1..=8 {
        let previous = format!("a{}", level - 1);
        command.push_str(&format!(
            " a{level}='{}'",
            [previous.as_str(); 10].join(";")
        ));
    }
    command.push_str("\na8");
    let started = std::time::Instant::now();
    let judged = rules().judge(&command);
    assert_eq!(judged.decision, Verdict::Ask, "{:?}", judged.parts.last());
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn dynamic_forms_ask() {
    check(
        &[
            "$CMD push",
            "${CMD} push",
            "\"$GIT\" push",
            "eval \"$X\"",
            "eval $X",
            "$(echo git) push",
            "`echo git` push",
            "source ./s.sh",
            ". ./s.sh",
            "git $(echo push)",
            "git $SUB",
            "git pu*",
            "git {push,pull}",
            "echo git push | bash",
            "echo git push | xargs git",
            "bash < script.sh",
            "bash -c \"$X\"",
            "sh -c $X",
            "bash <<EOF\n$X\nEOF",
            "$'\\x67it' push",
            "env -S 'git push'",
            "env --weird git push",
            "npm publish",
            "npm publish --tag next",
            "if true; then",
            "echo $(( $(git status) ))",
            "ls; npm publish",
            "PATH=/tmp/evil:$PATH npm run test",
        ],
        Verdict::Ask,
    );
}

#[test]
fn plain_allowed_commands_are_allowed() {
    check(
        &[
            "ls",
            "ls -la /tmp",
            "npm run test",
            "npm run test -- --watch",
            "ls && git status",
            "ls | ls",
            "ls; ls -l",
            "(ls)",
        ],
        Verdict::Allow,
    );
}

#[test]
fn no_rule_and_partly_allowed_commands_take_the_default() {
    check(
        &[
            "echo hi",
            "(( i++ ))",
            "((x = y + 1)); echo $x",
            "(( count > 5 )) && echo big",
            // An allow rule stands for the program found on PATH only.
            "/bin/ls",
            "./npm run test",
            "git commit -m 'push it'",
            "git pushx",
            "npm run test; curl -s https://example.com | sh -c cat",
            "ls; make",
            "npm run lint",
            "rm -r x",
            "rm x -f",
            "cat $HOME/file",
            "bash script.sh",
            "echo 'git push'",
            "cat <<'EOF'\ngit push\nEOF",
        ],
        Verdict::Default,
    );
}

#[test]
fn allow_rules_alone_never_ask() {
    let rules = Rules::new(vec![rule(&["ls"], Decision::Allow)]).unwrap();
    assert_eq!(rules.judge("$CMD").decision, Verdict::Default);
    assert_eq!(rules.judge("if true; then").decision, Verdict::Default);
    assert_eq!(rules.judge("ls $DIR").decision, Verdict::Allow);
    assert_eq!(rules.judge("ls; $CMD").decision, Verdict::Default);
}

#[test]
fn alternatives_and_reasons() {
    let rules = Rules::new(vec![Rule {
        command: vec![
            RuleWord::One("git".into()),
            RuleWord::Any(vec!["push".into(), "reset".into()]),
        ],
        decision: Decision::Deny,
        reason: Some("history is shared".into()),
        origin: Some("config.toml:3".into()),
        grants: None,
    }])
    .unwrap();
    let judged = rules.judge("ls; git reset --hard");
    assert_eq!(judged.decision, Verdict::Deny);
    let line = judged.explained().unwrap();
    assert_eq!(
        line,
        "`git reset --hard` matches the rule `git {push|reset}` (config.toml:3): history is shared"
    );
    let json = serde_json::to_value(&judged).unwrap();
    assert_eq!(json["decision"], "deny");
    assert_eq!(json["parts"][0]["command"], "ls");
    assert!(json["parts"][0]["decision"].is_null());
}

#[test]
fn proposals_no_broader_than_the_call() {
    let words = |w: &[&str]| w.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert!(dsh_rules::proposal(&words(&["npm", "run", "test"]), "npm run test -- -x").is_ok());
    assert!(dsh_rules::proposal(&words(&["npm", "install"]), "npm install left-pad").is_ok());
    for (prefix, command) in [
        (&["python"][..], "python -c 'print(1)'"),
        (&["bash"], "bash build.sh"),
        (&["sh", "-c"], "sh -c ls"),
        (&["env"], "env npm test"),
        (&["npm", "publish"], "npm run test"),
        (&["npm", "run", "test"], "ls; npm run test"),
        (&["npm", "run", "test"], "$X run test"),
        // An allow rule would not stand for it anyway.
        (&["npm", "install"], "FOO=1 timeout 60 npm install"),
        // One word allows a program anything; a path names no program on PATH.
        (&["make"], "make"),
        (&["pytest"], "pytest -x"),
        (&["./run.sh", "x"], "./run.sh x"),
        (&[], "ls"),
        (&[""], "ls"),
    ] {
        assert!(
            dsh_rules::proposal(&words(prefix), command).is_err(),
            "{prefix:?} for {command:?}"
        );
    }
    let err = dsh_rules::proposal(&words(&["python"]), "python x.py").unwrap_err();
    assert!(err.to_string().contains("run anything"), "{err}");
}

#[test]
fn a_rule_on_a_wrapper_is_refused() {
    let err = Rules::new(vec![rule(&["sudo", "rm"], Decision::Deny)]).unwrap_err();
    assert!(err.1.to_string().contains("wrapper"), "{}", err.1);
}

/// A command nested thousands of levels deep is judged on a thread of its
/// own, never overflowing the caller's small stack (a server's runtime
/// thread); past the bound it asks.
#[test]
fn deep_nesting_asks_without_overflowing_a_small_stack() {
    let shapes: [(&str, &str); 6] = [
        // `((` would open an arithmetic command, which runs nothing.
        ("( ", " )"),
        ("$(", ")"),
        ("{ ", "; }"),
        ("if true; then ", "; fi"),
        ("bash -c \"$(", ")\""),
        ("`", "`"),
    ];
    let judged = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || {
            let rules = rules();
            let mut seen = Vec::new();
            for (open, close) in shapes {
                for levels in [120, 2000, 100_000] {
                    let command =
                        format!("{}git push{}", open.repeat(levels), close.repeat(levels));
                    seen.push((open, levels, rules.judge(&command).decision));
                }
            }
            seen
        })
        .unwrap()
        .join()
        .expect("the judge's thread survived");
    for (open, levels, decision) in judged {
        // Backquotes pair up rather than nest: `` `…` `` 120 times is 60 pairs.
        assert!(
            matches!(decision, Verdict::Deny | Verdict::Ask),
            "{open:?} x{levels}: {decision:?}"
        );
        if levels == 100_000 {
            assert_eq!(decision, Verdict::Ask, "{open:?} x{levels}");
        }
    }
}
