//! The byte streams connections run over: their boxed halves, and the socket options
//! every cluster socket gets (bounded retransmissions, a long user timeout).

use std::io;
use tokio::io::{AsyncRead, AsyncWrite};

/// The reading half of a connection.
pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// The writing half of a connection.
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// Longest wait between retransmissions of a segment on a cluster socket (Linux's
/// `TCP_RTO_MAX_MS`, 6.15 and later; the kernel's default is 120 s). With exponential
/// backoff a request sent during a 28 s partition was retransmitted 51 s after it was
/// first sent, so the peer saw it 23 s after the link came back (found by the fault
/// campaign); bounded at 1 s, a healed link carries it again within a second.
const RTO_MAX_MS: libc::c_int = 1000;
/// `TCP_RTO_MAX_MS` from linux/tcp.h (the libc crate does not have it yet).
const TCP_RTO_MAX_MS: libc::c_int = 44;

/// How long sent data may stay unacknowledged before the kernel gives a cluster socket up
/// (`TCP_USER_TIMEOUT`). With retransmissions bounded at 1 s, the kernel's own limit
/// (`tcp_retries2`) is reached after about 13 s: a longer partition killed every
/// connection with a ping or request in flight, and a client that then stayed idle
/// towards that server never reconnected, so the server, hearing nothing, evicted it
/// ([`crate::session`]). A connection now outlives any partition shorter than the
/// eviction timeout (default 90 s): its retransmitted ping gets through once the link is
/// back. Requests still time out on their own deadlines.
const USER_TIMEOUT_MS: libc::c_int = 300_000;

/// Sets one `IPPROTO_TCP` option of `socket` to `value` (a failure is logged: the
/// kernel's default stays).
fn set_tcp_option(socket: &impl std::os::fd::AsRawFd, option: libc::c_int, value: libc::c_int) {
    // SAFETY: setsockopt on a socket this process owns, with a pointer to a c_int that
    // lives across the call and its exact size; it reads nothing else. Neither rustix nor
    // socket2 offers `TCP_RTO_MAX_MS`.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            option,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        tracing::debug!(option, error = %io::Error::last_os_error(), "TCP option not set");
    }
}

/// Sets [`RTO_MAX_MS`] (older kernels, ENOPROTOOPT, keep their default) and
/// [`USER_TIMEOUT_MS`] on `socket`.
pub(crate) fn bound_retransmissions(socket: &impl std::os::fd::AsRawFd) {
    set_tcp_option(socket, TCP_RTO_MAX_MS, RTO_MAX_MS);
    set_tcp_option(socket, libc::TCP_USER_TIMEOUT, USER_TIMEOUT_MS);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// TCP option `option` of `socket`; `None` on a kernel without it.
    fn tcp_option(socket: &impl AsRawFd, option: libc::c_int) -> Option<libc::c_int> {
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt on our own socket into a c_int and its length, both alive
        // across the call.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_TCP,
                option,
                (&raw mut value).cast(),
                &mut len,
            )
        };
        (rc == 0).then_some(value)
    }

    #[test]
    fn cluster_sockets_retransmit_at_least_every_second_and_outlive_short_partitions() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let socket = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let before = tcp_option(&socket, TCP_RTO_MAX_MS);
        bound_retransmissions(&socket);
        assert_eq!(
            tcp_option(&socket, libc::TCP_USER_TIMEOUT),
            Some(USER_TIMEOUT_MS),
            "a partition shorter than the eviction timeout must not kill the connection"
        );
        match before {
            // Linux 6.15 and later: 120 s by default, 1 s on our sockets.
            Some(default) => {
                assert!(default > RTO_MAX_MS, "{default}");
                assert_eq!(tcp_option(&socket, TCP_RTO_MAX_MS), Some(RTO_MAX_MS));
            }
            // An older kernel: nothing to set, and nothing fails.
            None => eprintln!("this kernel has no TCP_RTO_MAX_MS"),
        }
    }
}
