//! OUT-08 and the UTF-8 rules: invalid bytes are replaced, a tail never
//! starts inside a character.

use dsh_bash_local::{LocalBashExecutor, LocalConfig};

use super::fixture::{config, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_is_replaced() {
    let executor = LocalBashExecutor::new(config()).unwrap();
    let result = run(&executor, "printf 'ok \\xc3\\x28 \\xff end'").await;
    assert_eq!(result.stdout.text, "ok \u{fffd}( \u{fffd} end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tail_never_starts_inside_a_character() {
    // "€" is 3 bytes. With a cap of 10 and 4 euros (12 bytes) the window
    // starts 2 bytes into the first euro; those continuation bytes go.
    let executor = LocalBashExecutor::new(LocalConfig {
        max_output_bytes: 10,
        ..config()
    })
    .unwrap();
    let result = run(&executor, "printf '€€€€'").await;
    assert!(result.stdout.truncated);
    assert_eq!(result.stdout.text, "€€€");
    // 2-byte and 4-byte characters at the boundary too.
    let result = run(&executor, "printf 'ééééé𝄞'").await; // 10 + 4 bytes
    assert_eq!(result.stdout.text, "ééé𝄞");
    let raw = std::fs::read(result.stdout.spill_path.unwrap()).unwrap();
    assert_eq!(raw, "ééééé𝄞".as_bytes());
}
