//! The kernel's own account of what a Landlock-confined command was
//! refused: the audit records of Landlock ABI 7 (Linux 6.15+), so that
//! `denied` is a report, not a guess from text the command can print.
//!
//! Where it works: Landlock ABI 7, the kernel's audit switched on (by the
//! operator: `auditctl -e 1`, auditd, journald's audit), and a server that
//! may read the audit multicast (`CAP_AUDIT_READ`) and write to the audit
//! log (`CAP_AUDIT_WRITE`, for the markers below): in practice a server
//! running as root. Anywhere else the [`Listener`] is absent and `denied`
//! stays the stderr guess, said as one.
//!
//! How: the command's child names itself (`PR_SET_NAME`, a name unique to
//! this server and command) just before `landlock_restrict_self` with
//! `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON`; the kernel logs a denial as a
//! `LANDLOCK_ACCESS` record naming the domain, then, the first time, a
//! `LANDLOCK_DOMAIN` record naming the domain's creator by that name. One
//! thread of the server reads the audit multicast and files each refusal
//! under its command. When a failed command's tree is gone, the server
//! writes a marker of its own to the audit log (`AUDIT_USER`) and waits
//! until it comes back through the multicast: the audit queue is FIFO, so
//! every record the command caused has arrived by then.
//!
//! A command cannot forge a record (it holds no capability and its
//! `AUDIT_USER` messages are refused). The name is not what a refusal is
//! filed by alone: a `LANDLOCK_DOMAIN` record also names the pid of the
//! domain's creator, and the server knows the pid of each command's child
//! (the launcher tells the watch as the child starts, [`SpawnObserver`]);
//! a domain counts for a command only when both match. So a command that
//! learns or predicts another command's name and names its own nested
//! domain after it is not believed (its creator pid is its own process,
//! never the other command's child, which is alive while its account can
//! be asked for); a command's own nested domain made by its first process
//! (the same pid) is the command's own, so it can at most report a real
//! refusal of its own. The audit pid is the initial pid namespace's, like
//! the server's (the audit multicast is refused in any other). When the
//! account may be incomplete (records lost by the kernel or by our socket,
//! audit switched off meanwhile, a marker that did not come back within a
//! second) or would be slow (the kernel's audit queue over half full: the
//! marker would wait for room), it is not given, and the guess stands.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use dsh_sandbox::{BoxFuture, DenialWitness, SpawnObserver};

const AUDIT_GET: u16 = 1000;
const AUDIT_USER: u16 = 1005;
const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;
/// The multicast group of the audit log (`AUDIT_NLGRP_READLOG`).
const READLOG_GROUP: u32 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_HDRLEN: usize = 16;
/// How long a marker may take to come back.
const MARKER_WAIT: Duration = Duration::from_secs(1);
/// Domains met whose creator is not yet named, kept at most.
const MAX_UNNAMED: usize = 256;

/// The part of `struct audit_status` this reads.
#[derive(Clone, Copy, Debug)]
struct AuditStatus {
    enabled: u32,
    backlog_limit: u32,
    lost: u32,
    backlog: u32,
}

/// What the reader thread has filed.
#[derive(Debug, Default)]
struct Filed {
    /// Live commands by name: what the kernel refused each so far, each
    /// with the pid that created the refusing domain.
    watched: HashMap<String, Vec<(u32, String)>>,
    /// Domains met: ours by command name with the creator's pid, or `None`
    /// (another program's).
    domains: HashMap<u64, Option<(String, u32)>>,
    /// Refusals of domains whose creator record has not come yet.
    unnamed: HashMap<u64, Vec<String>>,
    /// Bumped whenever our socket dropped records (`ENOBUFS`).
    overruns: u64,
    /// The newest of our markers seen on the multicast.
    seen: u64,
}

/// The server's one reader of the audit multicast.
#[derive(Debug)]
pub(crate) struct Listener {
    /// Requests to the kernel (status, markers), one at a time.
    control: Mutex<OwnedFd>,
    filed: Mutex<Filed>,
    /// Signalled when a marker of ours arrives.
    arrived: Condvar,
    /// Numbers commands and markers.
    next: AtomicU64,
    /// This server's prefix in names (random).
    tag: u32,
    /// What starts each of this server's markers: `dsh-bash sync <tag> `.
    marker: String,
}

impl Listener {
    /// The listener `slot` holds, started the first time it is asked for
    /// (its provider owns the slot); `None` where this process may not
    /// read or write the audit log.
    pub(crate) fn get(slot: &OnceLock<Option<Arc<Listener>>>) -> Option<Arc<Listener>> {
        slot.get_or_init(|| match Listener::start() {
            Ok(listener) => Some(listener),
            Err(err) => {
                tracing::debug!("no kernel account of Landlock denials: {err}");
                None
            }
        })
        .clone()
    }

    /// Opens the sockets and starts the reader thread, which keeps the
    /// listener for the life of the process.
    fn start() -> io::Result<Arc<Listener>> {
        let multicast = crate::sys::audit_socket(READLOG_GROUP)?;
        let control = crate::sys::audit_socket(0)?;
        let tag = random_tag();
        let listener = Arc::new(Listener {
            control: Mutex::new(control),
            filed: Mutex::new(Filed::default()),
            arrived: Condvar::new(),
            next: AtomicU64::new(1),
            tag,
            marker: format!("dsh-bash sync {tag:08x} "),
        });
        // One marker with an acknowledgement: proves we may write the log.
        listener.mark(true)?;
        let reader = Arc::clone(&listener);
        std::thread::Builder::new()
            .name("dsh-audit".into())
            .spawn(move || reader.read(&multicast))?;
        Ok(listener)
    }

    /// A watch for one command about to be confined; `None` when audit is
    /// off now.
    pub(crate) fn watch(self: &Arc<Self>) -> Option<Watch> {
        let status = self.status().ok().filter(|s| s.enabled != 0)?;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        // 15 bytes at most, the kernel's limit for a task name.
        let name = format!("dsh{:06x}{:06x}", self.tag & 0xff_ffff, n & 0xff_ffff);
        let mut filed = self.filed();
        filed.watched.insert(name.clone(), Vec::new());
        let overruns = filed.overruns;
        drop(filed);
        Some(Watch {
            claim: Claim {
                listener: Arc::clone(self),
                name,
                lost: status.lost,
                overruns,
                child: Arc::new(AtomicU32::new(0)),
            },
        })
    }

    fn filed(&self) -> std::sync::MutexGuard<'_, Filed> {
        self.filed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kernel's audit status.
    fn status(&self) -> io::Result<AuditStatus> {
        let control = self.control.lock().unwrap_or_else(PoisonError::into_inner);
        let seq = self.next.fetch_add(1, Ordering::Relaxed) as u32;
        send(&control, AUDIT_GET, libc::NLM_F_REQUEST as u16, seq, &[])?;
        let mut buffer = [0u8; 8192];
        loop {
            let got = crate::sys::recv(&control, &mut buffer)?;
            for (kind, reply_seq, payload) in messages(&buffer[..got]) {
                if reply_seq != seq {
                    continue;
                }
                if kind == NLMSG_ERROR {
                    return Err(nlmsg_error(payload));
                }
                if kind == AUDIT_GET && payload.len() >= 32 {
                    let word = |at: usize| {
                        u32::from_ne_bytes([
                            payload[at],
                            payload[at + 1],
                            payload[at + 2],
                            payload[at + 3],
                        ])
                    };
                    return Ok(AuditStatus {
                        enabled: word(4),
                        backlog_limit: word(20),
                        lost: word(24),
                        backlog: word(28),
                    });
                }
            }
        }
    }

    /// Writes a marker to the audit log; its number.
    fn mark(&self, acknowledged: bool) -> io::Result<u64> {
        let control = self.control.lock().unwrap_or_else(PoisonError::into_inner);
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let text = format!("{}{n}\0", self.marker);
        let mut flags = libc::NLM_F_REQUEST as u16;
        if acknowledged {
            flags |= libc::NLM_F_ACK as u16;
        }
        send(&control, AUDIT_USER, flags, n as u32, text.as_bytes())?;
        if acknowledged {
            let mut buffer = [0u8; 4096];
            let got = crate::sys::recv(&control, &mut buffer)?;
            let refused = messages(&buffer[..got])
                .find(|(kind, _, _)| *kind == NLMSG_ERROR)
                .map(|(_, _, payload)| nlmsg_error(payload))
                .filter(|err| err.raw_os_error() != Some(0));
            if let Some(err) = refused {
                return Err(err);
            }
        }
        Ok(n)
    }

    /// The reader thread: files every Landlock record and marker.
    fn read(&self, multicast: &OwnedFd) {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let got = match crate::sys::recv(multicast, &mut buffer) {
                Ok(got) => got,
                Err(err) if err.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.filed().overruns += 1;
                    continue;
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => {
                    tracing::warn!("the audit reader stops: {err}");
                    // Nothing more will come: every account from now on
                    // is incomplete.
                    self.filed().overruns = u64::MAX;
                    return;
                }
            };
            for (kind, _, payload) in messages(&buffer[..got]) {
                let payload = payload.split(|b| *b == 0).next().unwrap_or_default();
                let text = String::from_utf8_lossy(payload);
                match kind {
                    AUDIT_LANDLOCK_ACCESS => self.file_access(&text),
                    AUDIT_LANDLOCK_DOMAIN => self.file_domain(&text),
                    AUDIT_USER => self.file_marker(&text),
                    _ => {}
                }
            }
        }
    }

    fn file_access(&self, text: &str) {
        let Some(domain) = domain_of(text) else {
            return;
        };
        let refusal = refusal(text);
        let mut filed = self.filed();
        let filed = &mut *filed;
        match filed.domains.get(&domain) {
            Some(Some((name, creator))) => {
                if let Some(list) = filed.watched.get_mut(name) {
                    add(list, (*creator, refusal));
                }
            }
            Some(None) => {}
            None if filed.unnamed.len() < MAX_UNNAMED || filed.unnamed.contains_key(&domain) => {
                let list = filed.unnamed.entry(domain).or_default();
                if list.len() < dsh_bash::MAX_REFUSALS && !list.contains(&refusal) {
                    list.push(refusal);
                }
            }
            None => {}
        }
    }

    fn file_domain(&self, text: &str) {
        let Some(domain) = domain_of(text) else {
            return;
        };
        let mut filed = self.filed();
        let filed = &mut *filed;
        match field(text, "status").as_deref() {
            Some("allocated") => {
                let early = filed.unnamed.remove(&domain).unwrap_or_default();
                let name = field(text, "comm").filter(|n| filed.watched.contains_key(n));
                let creator = field(text, "pid").and_then(|p| p.parse::<u32>().ok());
                let ours = name.zip(creator);
                if let Some((list, creator)) = ours
                    .as_ref()
                    .and_then(|(n, c)| Some((filed.watched.get_mut(n)?, *c)))
                {
                    for refusal in early {
                        add(list, (creator, refusal));
                    }
                }
                filed.domains.insert(domain, ours);
            }
            Some("deallocated") => {
                filed.domains.remove(&domain);
                filed.unnamed.remove(&domain);
            }
            _ => {}
        }
    }

    fn file_marker(&self, text: &str) {
        let Some(at) = text.find(&self.marker) else {
            return;
        };
        let number = text[at + self.marker.len()..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(n) = number {
            let mut filed = self.filed();
            filed.seen = filed.seen.max(n);
            self.arrived.notify_all();
        }
    }
}

/// The Landlock domain a record names (`domain=` in hex).
fn domain_of(text: &str) -> Option<u64> {
    field(text, "domain").and_then(|d| u64::from_str_radix(&d, 16).ok())
}

/// Adds `refusal` to `list` unless it is there or the list is full.
fn add(list: &mut Vec<(u32, String)>, refusal: (u32, String)) {
    if list.len() < dsh_bash::MAX_REFUSALS && !list.contains(&refusal) {
        list.push(refusal);
    }
}

/// One refusal in words, from a `LANDLOCK_ACCESS` record:
/// `fs.make_reg on /etc`, or the blockers and the record's other fields.
fn refusal(text: &str) -> String {
    let blockers = field(text, "blockers").unwrap_or_else(|| "unknown".into());
    if let Some(path) = field(text, "path") {
        return format!("{blockers} on {path}");
    }
    let rest: Vec<String> = ["daddr", "dest", "saddr", "src", "opid", "ocomm"]
        .iter()
        .filter_map(|key| field(text, key).map(|value| format!("{key}={value}")))
        .collect();
    if rest.is_empty() {
        blockers
    } else {
        format!("{blockers} {}", rest.join(" "))
    }
}

/// The value of `key=` in an audit record: a quoted string, a hex-encoded
/// one (the kernel's form for untrusted text with odd bytes), or a word.
fn field(text: &str, key: &str) -> Option<String> {
    let needle = format!(" {key}=");
    let at = text.find(&needle)? + needle.len();
    let rest = &text[at..];
    if let Some(quoted) = rest.strip_prefix('"') {
        return quoted.split('"').next().map(str::to_owned);
    }
    let word = rest.split(' ').next().unwrap_or_default();
    let hex = key != "domain"
        && word.len().is_multiple_of(2)
        && word.len() >= 2
        && word
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_lowercase());
    if hex && matches!(key, "path" | "comm" | "ocomm") {
        let bytes: Option<Vec<u8>> = (0..word.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&word[i..i + 2], 16).ok())
            .collect();
        return bytes.map(|b| String::from_utf8_lossy(&b).into_owned());
    }
    Some(word.to_owned())
}

/// What one command's account is checked against.
#[derive(Clone, Debug)]
struct Claim {
    listener: Arc<Listener>,
    name: String,
    /// The kernel's lost-record count when the command started.
    lost: u32,
    /// Our socket's overruns when the command started.
    overruns: u64,
    /// The pid of the command's child once started (0 before).
    child: Arc<AtomicU32>,
}

impl Claim {
    /// The account, once a marker written now has come back; `None` when
    /// it may be incomplete. Blocking (the kernel's audit backlog, the
    /// marker's way back): off the runtime threads.
    fn account(&self) -> Option<Vec<String>> {
        let listener = &self.listener;
        let status = listener.status().ok()?;
        if status.enabled == 0 || status.lost != self.lost {
            return None;
        }
        // A queue near its limit would make the marker wait for room (up
        // to the kernel's backlog wait, a minute by default): no account.
        if status.backlog_limit != 0 && status.backlog.saturating_mul(2) > status.backlog_limit {
            return None;
        }
        let n = listener.mark(false).ok()?;
        let filed = listener.filed();
        let (filed, waited) = listener
            .arrived
            .wait_timeout_while(filed, MARKER_WAIT, |filed| filed.seen < n)
            .unwrap_or_else(PoisonError::into_inner);
        if waited.timed_out() || filed.overruns != self.overruns {
            return None;
        }
        let child = self.child.load(Ordering::Relaxed);
        if child == 0 {
            return None;
        }
        Some(made_by(filed.watched.get(&self.name)?, child))
    }
}

/// One command's claim on the listener: what the kernel refused it. Ends
/// when dropped.
#[derive(Debug)]
pub(crate) struct Watch {
    claim: Claim,
}

impl Watch {
    /// The name the command's child takes before restricting itself.
    pub(crate) fn name(&self) -> CString {
        CString::new(self.claim.name.clone()).unwrap_or_default()
    }
}

impl DenialWitness for Watch {
    fn refusals(&self) -> BoxFuture<'_, Option<Vec<String>>> {
        let claim = self.claim.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || claim.account())
                .await
                .ok()
                .flatten()
        })
    }
}

impl SpawnObserver for Watch {
    fn started(&self, pid: u32) {
        self.claim.child.store(pid, Ordering::Relaxed);
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut filed = self.claim.listener.filed();
        filed.watched.remove(&self.claim.name);
    }
}

/// Sends one netlink message to the kernel.
fn send(fd: &OwnedFd, kind: u16, flags: u16, seq: u32, payload: &[u8]) -> io::Result<()> {
    let length = NLMSG_HDRLEN + payload.len();
    let mut message = Vec::with_capacity(length);
    message.extend_from_slice(&(length as u32).to_ne_bytes());
    message.extend_from_slice(&kind.to_ne_bytes());
    message.extend_from_slice(&flags.to_ne_bytes());
    message.extend_from_slice(&seq.to_ne_bytes());
    message.extend_from_slice(&0u32.to_ne_bytes());
    message.extend_from_slice(payload);
    crate::sys::send_to_kernel(fd, &message)
}

/// The refusals of domains `child` created: another process's domain of
/// the same name is a forgery.
fn made_by(refused: &[(u32, String)], child: u32) -> Vec<String> {
    refused
        .iter()
        .filter(|(creator, _)| *creator == child)
        .map(|(_, refusal)| refusal.clone())
        .collect()
}

/// The netlink messages of one datagram: (type, sequence, payload).
fn messages(mut data: &[u8]) -> impl Iterator<Item = (u16, u32, &[u8])> {
    std::iter::from_fn(move || {
        if data.len() < NLMSG_HDRLEN {
            return None;
        }
        let length = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize;
        let kind = u16::from_ne_bytes([data[4], data[5]]);
        let seq = u32::from_ne_bytes([data[8], data[9], data[10], data[11]]);
        // A length that does not fit the datagram: take what it holds.
        let end = if (NLMSG_HDRLEN..=data.len()).contains(&length) {
            length
        } else {
            data.len()
        };
        let payload = &data[NLMSG_HDRLEN..end];
        let step = (end + 3) & !3;
        data = data.get(step..).unwrap_or_default();
        Some((kind, seq, payload))
    })
}

/// The errno of an `NLMSG_ERROR` payload (0: an acknowledgement).
fn nlmsg_error(payload: &[u8]) -> io::Error {
    let code = payload
        .get(..4)
        .map_or(-libc::EIO, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    io::Error::from_raw_os_error(-code)
}

/// Whether the kernel's audit log would name a Landlock command's refusals
/// to this process, or why not (blocking: it opens the audit sockets and
/// writes one marker to the log, as a server's first confined command does).
pub(crate) fn available(landlock_abi: i64) -> Result<(), String> {
    if landlock_abi < 7 {
        return Err(format!(
            "Landlock ABI {landlock_abi}: the kernel logs Landlock denials from ABI 7 (Linux 6.15)"
        ));
    }
    let listener = Listener::start()
        .map_err(|err| format!("this process may not read and write the audit log: {err}"))?;
    match listener.status() {
        Ok(status) if status.enabled != 0 => Ok(()),
        Ok(_) => Err("the kernel's audit is off".into()),
        Err(err) => Err(format!("the kernel's audit status cannot be read: {err}")),
    }
}

/// 32 random bits (from the standard library's per-process hash keys).
fn random_tag() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_named_like_a_command_by_another_process_is_not_its_own() {
        let listener = Listener {
            control: Mutex::new(std::fs::File::open("/dev/null").unwrap().into()),
            filed: Mutex::new(Filed::default()),
            arrived: Condvar::new(),
            next: AtomicU64::new(1),
            tag: 1,
            marker: "dsh-bash sync 00000001 ".into(),
        };
        listener
            .filed()
            .watched
            .insert("dsh00000100002".into(), Vec::new());
        // The forger's domain, then the command's own; each refuses once
        // (the forger's access arrives before its domain record).
        listener.file_access(
            r#"audit(1.2:3): domain=2a blockers=fs.make_reg path="/etc" dev="sda" ino=2"#,
        );
        listener.file_domain(r#"audit(1.2:4): domain=2a status=allocated mode=enforcing pid=4242 uid=0 exe="/usr/bin/python3" comm="dsh00000100002""#);
        listener.file_domain(r#"audit(1.2:5): domain=2b status=allocated mode=enforcing pid=777 uid=0 exe="/srv/dsh-bash" comm="dsh00000100002""#);
        listener.file_access(
            r#"audit(1.2:6): domain=2b blockers=fs.make_reg path="/usr" dev="sda" ino=3"#,
        );
        let filed = listener.filed();
        let refused = &filed.watched["dsh00000100002"];
        assert_eq!(made_by(refused, 777), ["fs.make_reg on /usr"]);
        assert_eq!(made_by(refused, 4242), ["fs.make_reg on /etc"]);
        assert!(made_by(refused, 1).is_empty());
    }

    #[test]
    fn records_read_as_refusals() {
        let access = r#"audit(1796174954.542:3): domain=1b020c438 blockers=fs.make_reg path="/etc" dev="vda" ino=19"#;
        assert_eq!(field(access, "domain").as_deref(), Some("1b020c438"));
        assert_eq!(refusal(access), "fs.make_reg on /etc");
        let hexed = "audit(1.2:3): domain=1a blockers=fs.write_file path=2F746D702F6120622E747874 dev=\"vda\" ino=5";
        assert_eq!(refusal(hexed), "fs.write_file on /tmp/a b.txt");
        let net = "audit(1.2:3): domain=1a blockers=net.connect_tcp daddr=127.0.0.1 dest=80";
        assert_eq!(refusal(net), "net.connect_tcp daddr=127.0.0.1 dest=80");
        let domain = r#"audit(1.2:3): domain=1b020c438 status=allocated mode=enforcing pid=21483 uid=0 exe="/x" comm="dsh00aa01000002""#;
        assert_eq!(field(domain, "comm").as_deref(), Some("dsh00aa01000002"));
        assert_eq!(field(domain, "status").as_deref(), Some("allocated"));
    }

    #[test]
    fn a_datagram_splits_into_its_messages() {
        let mut data = Vec::new();
        for (kind, text) in [(1423u16, "one"), (1424, "second")] {
            let length = (NLMSG_HDRLEN + text.len()) as u32;
            data.extend_from_slice(&length.to_ne_bytes());
            data.extend_from_slice(&kind.to_ne_bytes());
            data.extend_from_slice(&[0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
            data.extend_from_slice(text.as_bytes());
            while data.len() % 4 != 0 {
                data.push(0);
            }
        }
        let got: Vec<(u16, u32, String)> = messages(&data)
            .map(|(k, s, p)| (k, s, String::from_utf8_lossy(p).into_owned()))
            .collect();
        assert_eq!(
            got,
            [(1423, 7, "one".to_owned()), (1424, 7, "second".to_owned())]
        );
    }
}
