//! SOCKS5 (RFC 1928): no authentication, `CONNECT` only, with a domain
//! name or an IP literal; the first byte (the version, 5) was read by the
//! caller.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::meter::Metered;
use crate::splice::Spliced;
use crate::upstream::Refusal;
use crate::DoorState;

const NO_AUTHENTICATION: u8 = 0;
const NO_ACCEPTABLE_METHOD: u8 = 0xff;
const CONNECT: u8 = 1;

/// Reply codes.
const SUCCEEDED: u8 = 0;
const NOT_ALLOWED: u8 = 2;
const HOST_UNREACHABLE: u8 = 4;
const REFUSED: u8 = 5;
const COMMAND_NOT_SUPPORTED: u8 = 7;
const ADDRESS_NOT_SUPPORTED: u8 = 8;

async fn reply<S: AsyncWrite + Unpin>(stream: &mut S, code: u8) -> std::io::Result<()> {
    stream.write_all(&[5, code, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
    stream.flush().await
}

/// Reads the request's address: `Ok(None)` for an address type SOCKS5 does
/// not define.
async fn address<S: AsyncRead + Unpin>(
    stream: &mut S,
    kind: u8,
) -> std::io::Result<Option<String>> {
    Ok(match kind {
        1 => {
            let mut octets = [0u8; 4];
            stream.read_exact(&mut octets).await?;
            Some(Ipv4Addr::from(octets).to_string())
        }
        3 => {
            let len = stream.read_u8().await?;
            let mut name = vec![0u8; usize::from(len)];
            stream.read_exact(&mut name).await?;
            Some(String::from_utf8_lossy(&name).into_owned())
        }
        4 => {
            let mut octets = [0u8; 16];
            stream.read_exact(&mut octets).await?;
            Some(Ipv6Addr::from(octets).to_string())
        }
        _ => None,
    })
}

async fn handshake<S>(stream: &mut S) -> std::io::Result<Option<(u8, String, u16)>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let methods = stream.read_u8().await?;
    let mut offered = vec![0u8; usize::from(methods)];
    stream.read_exact(&mut offered).await?;
    if !offered.contains(&NO_AUTHENTICATION) {
        stream.write_all(&[5, NO_ACCEPTABLE_METHOD]).await?;
        return Ok(None);
    }
    stream.write_all(&[5, NO_AUTHENTICATION]).await?;
    let mut head = [0u8; 4];
    stream.read_exact(&mut head).await?;
    if head[0] != 5 {
        return Ok(None);
    }
    let Some(host) = address(stream, head[3]).await? else {
        reply(stream, ADDRESS_NOT_SUPPORTED).await?;
        return Ok(None);
    };
    let port = stream.read_u16().await?;
    Ok(Some((head[1], host, port)))
}

/// Serves one SOCKS5 connection.
pub(crate) async fn serve<S>(mut stream: Metered<S>, state: Arc<DoorState>)
where
    S: AsyncRead + AsyncWrite + Spliced + Unpin + Send,
{
    let Ok(Some((command, host, port))) = handshake(&mut stream).await else {
        return;
    };
    if command != CONNECT {
        let _ = reply(&mut stream, COMMAND_NOT_SUPPORTED).await;
        return;
    }
    let upstream = match crate::upstream::connect(&state, &host, port).await {
        Ok(upstream) => upstream,
        Err(refusal) => {
            let code = match refusal {
                Refusal::NotAllowed | Refusal::Denied | Refusal::Internal(_) => NOT_ALLOWED,
                Refusal::Unreachable(err)
                    if err.kind() == std::io::ErrorKind::ConnectionRefused =>
                {
                    REFUSED
                }
                Refusal::Unreachable(_) => HOST_UNREACHABLE,
            };
            let _ = reply(&mut stream, code).await;
            return;
        }
    };
    if reply(&mut stream, SUCCEEDED).await.is_ok() {
        crate::splice::relay(stream, &[], upstream).await;
    }
}
