//! SPEC §9.3: hundreds of MB on both streams at once: no deadlock, bounded
//! memory, complete spill files byte for byte.

use std::io::Read;

use super::fixture::{executor, run};

const MIB: u64 = 1 << 20;
const EACH: u64 = 300 * MIB;

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// Checks that `path` holds exactly `len` bytes of `pattern` repeated.
fn assert_repeats(path: &std::path::Path, pattern: &[u8], len: u64) {
    let mut file = std::fs::File::open(path).unwrap();
    assert_eq!(file.metadata().unwrap().len(), len, "{}", path.display());
    let mut expected = Vec::new();
    while expected.len() < (1 << 20) {
        expected.extend_from_slice(pattern);
    }
    let mut buf = vec![0u8; expected.len()];
    let mut offset = 0u64;
    loop {
        let n = file.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        let phase = usize::try_from(offset % pattern.len() as u64).unwrap();
        for (i, byte) in buf[..n].iter().enumerate() {
            assert_eq!(
                *byte,
                pattern[(phase + i) % pattern.len()],
                "byte {} differs",
                offset + i as u64
            );
        }
        offset += n as u64;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_streams_flooding_at_once() {
    let executor = executor();
    let before = peak_rss_kib();
    let command = format!(
        "yes 0123456789abcdef | head -c {EACH} & yes ZYXWVUTSRQPONMLK | head -c {EACH} >&2; wait"
    );
    let result = run(&executor, &command).await;
    let grown_mib = (peak_rss_kib() - before) / 1024;
    println!(
        "{} MiB per stream passed; peak RSS grew by {grown_mib} MiB",
        EACH / MIB
    );
    assert_eq!(result.exit_code, Some(0));
    assert!(result.stdout.truncated && result.stderr.truncated);
    assert!(result.stdout.text.len() <= 64_000);
    assert_repeats(
        result.stdout.spill_path.as_ref().unwrap(),
        b"0123456789abcdef\n",
        EACH,
    );
    assert_repeats(
        result.stderr.spill_path.as_ref().unwrap(),
        b"ZYXWVUTSRQPONMLK\n",
        EACH,
    );
    assert!(
        grown_mib < 128,
        "memory grew by {grown_mib} MiB while {} MiB passed",
        2 * EACH / MIB
    );
    for path in [
        result.stdout.spill_path.unwrap(),
        result.stderr.spill_path.unwrap(),
    ] {
        std::fs::remove_file(path).unwrap();
    }
}
