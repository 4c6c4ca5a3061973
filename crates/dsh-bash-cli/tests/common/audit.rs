//! The kernel's audit switch, read and set over netlink (root only), for
//! the tests of kernel-reported denials.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NETLINK_AUDIT: i32 = 9;
const AUDIT_GET: u16 = 1000;
const AUDIT_SET: u16 = 1001;
const AUDIT_STATUS_ENABLED: u32 = 1;
const NLMSG_ERROR: u16 = 2;

fn socket() -> Option<OwnedFd> {
    // SAFETY: socket with integer arguments.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            NETLINK_AUDIT,
        )
    };
    // SAFETY: the kernel just handed us this fd.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `kind` with `payload` (acknowledged), then receives until a
/// message of type `want` (its payload), or, for `want` = `NLMSG_ERROR`,
/// the acknowledgement (its errno as payload).
fn request(kind: u16, payload: &[u8], want: u16) -> Option<Vec<u8>> {
    let fd = socket()?;
    let length = 16 + payload.len();
    let mut message = Vec::new();
    message.extend_from_slice(&(length as u32).to_ne_bytes());
    message.extend_from_slice(&kind.to_ne_bytes());
    message.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16).to_ne_bytes());
    message.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    message.extend_from_slice(payload);
    // SAFETY: an all-zero sockaddr_nl addresses the kernel.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: sendto reads the buffers we own.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            message.as_ptr().cast(),
            message.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return None;
    }
    let mut buffer = vec![0u8; 8192];
    for _ in 0..4 {
        // SAFETY: recv writes into the buffer we own.
        let got =
            unsafe { libc::recv(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len(), 0) };
        if got < 20 {
            return None;
        }
        let kind = u16::from_ne_bytes([buffer[4], buffer[5]]);
        let body = buffer[16..got as usize].to_vec();
        if kind == NLMSG_ERROR && want != NLMSG_ERROR {
            // An acknowledgement (errno 0) comes before the reply; a
            // refusal ends it.
            if body[..4] != [0, 0, 0, 0] {
                return None;
            }
            continue;
        }
        if kind == want {
            return Some(body);
        }
    }
    None
}

/// Whether the kernel's audit is on; `None` when it cannot be read (not
/// root, no audit in the kernel).
pub fn enabled() -> Option<bool> {
    let status = request(AUDIT_GET, &[], AUDIT_GET)?;
    let enabled = u32::from_ne_bytes(status.get(4..8)?.try_into().ok()?);
    Some(enabled != 0)
}

/// Switches the kernel's audit on or off; true if the kernel agreed.
pub fn set(on: bool) -> bool {
    let mut status = [0u32; 10];
    status[0] = AUDIT_STATUS_ENABLED;
    status[1] = u32::from(on);
    let payload: Vec<u8> = status.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let acknowledged = request(AUDIT_SET, &payload, NLMSG_ERROR);
    acknowledged.is_some_and(|errno| errno[..4] == [0, 0, 0, 0]) && enabled() == Some(on)
}

/// Audit switched on for as long as it lives, and back as it was after.
pub struct Switched {
    was: bool,
}

impl Switched {
    /// `None` where this process may not switch audit.
    pub fn on() -> Option<Switched> {
        let was = enabled()?;
        set(true).then_some(Switched { was })
    }
}

impl Drop for Switched {
    fn drop(&mut self) {
        set(self.was);
    }
}
