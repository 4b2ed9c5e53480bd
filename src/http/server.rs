//! The HTTP server loop: hyper with bounded headers and read timeouts, so a slow or hostile
//! client cannot hold a connection forever, and a graceful drain on shutdown.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The largest request header block accepted (HTTP/1 read buffer, HTTP/2 header list).
pub const MAX_HEADER_BYTES: usize = 64 * 1024;

/// Serves `app` on `listener` until `shutdown` is cancelled, then stops accepting and waits up
/// to `grace` for the requests in flight.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    shutdown: CancellationToken,
    grace: Duration,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_buf_size(MAX_HEADER_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10));
    let graceful = GracefulShutdown::new();

    loop {
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(TransportErrors::new(stream)), service)
            .into_owned();
        let watched = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = watched.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after {grace:?}; closing their connections");
    }
}

/// The answers hyper writes itself when a request cannot be parsed (a control character in a
/// header, a header block over [`MAX_HEADER_BYTES`], an over-long URI) have no body. This
/// wrapper of the connection replaces exactly those (status 400, 431 or 414 with
/// `connection: close` and `content-length: 0`, which the application never writes: its errors
/// always carry a body) by the same status with the JSON error body of every other error and an
/// `X-Request-Id`.
struct TransportErrors<I> {
    inner: I,
    /// A replacement being written, how much of it is written, and the length hyper wrote.
    pending: Option<(Vec<u8>, usize, usize)>,
}

impl<I> TransportErrors<I> {
    fn new(inner: I) -> Self {
        TransportErrors {
            inner,
            pending: None,
        }
    }
}

/// The replacement of a bodiless transport-level error answer, if `buf` is one.
fn rewrite_transport_error(buf: &[u8]) -> Option<Vec<u8>> {
    let (status, reason, code, message) = if buf.starts_with(b"HTTP/1.1 400 Bad Request\r\n") {
        (
            400,
            "Bad Request",
            "invalid_request",
            "The request could not be parsed: a header name or value has characters HTTP does not allow (such as a CR or LF), or the request line is malformed.",
        )
    } else if buf.starts_with(b"HTTP/1.1 431 Request Header Fields Too Large\r\n") {
        (
            431,
            "Request Header Fields Too Large",
            "headers_too_large",
            "The request's headers are larger than 64 KiB.",
        )
    } else if buf.starts_with(b"HTTP/1.1 414 URI Too Long\r\n") {
        (
            414,
            "URI Too Long",
            "uri_too_long",
            "The request's URI is too long.",
        )
    } else {
        return None;
    };
    let head = std::str::from_utf8(buf).ok()?;
    let lower = head.to_ascii_lowercase();
    if !lower.contains("\r\ncontent-length: 0\r\n")
        || !lower.contains("\r\nconnection: close\r\n")
        || !head.ends_with("\r\n\r\n")
    {
        return None;
    }
    let request_id = super::request_id::generate();
    let body = serde_json::json!({"error": {
        "code": code, "message": message, "request_id": request_id, "details": {}
    }})
    .to_string();
    Some(
        format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nx-request-id: {request_id}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<I: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for TransportErrors<I> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: tokio::io::AsyncWrite + Unpin> TransportErrors<I> {
    /// Writes the pending replacement; `Ready(Ok(n))` with hyper's length once it is out.
    fn drive_pending(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::task::Poll;
        while let Some((bytes, written, original)) = self.pending.as_mut() {
            if *written == bytes.len() {
                let n = *original;
                self.pending = None;
                return Poll::Ready(Ok(n));
            }
            match std::pin::Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(0))
    }
}

impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for TransportErrors<I> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.pending.is_none() {
            match rewrite_transport_error(buf) {
                Some(replacement) => self.pending = Some((replacement, 0, buf.len())),
                None => return std::pin::Pin::new(&mut self.inner).poll_write(cx, buf),
            }
        }
        self.drive_pending(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.pending.is_none() {
            // A transport error answer is a head alone: one slice.
            let candidate = bufs.iter().find(|b| !b.is_empty());
            let only_one = bufs.iter().filter(|b| !b.is_empty()).count() == 1;
            match candidate
                .filter(|_| only_one)
                .and_then(|b| rewrite_transport_error(b))
            {
                Some(replacement) => {
                    let n = bufs.iter().map(|b| b.len()).sum();
                    self.pending = Some((replacement, 0, n));
                }
                None => {
                    return std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
                }
            }
        }
        self.drive_pending(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.pending.is_some() {
            match self.drive_pending(cx) {
                std::task::Poll::Ready(Ok(_)) => {}
                std::task::Poll::Ready(Err(e)) => return std::task::Poll::Ready(Err(e)),
                std::task::Poll::Pending => return std::task::Poll::Pending,
            }
        }
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bodiless_transport_errors_are_rewritten() {
        let hyper_400 = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Tue, 24 Nov 2026 21:11:29 GMT\r\n\r\n";
        let out = String::from_utf8(rewrite_transport_error(hyper_400).unwrap()).unwrap();
        assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"));
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "invalid_request");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(head.contains(&format!(
            "x-request-id: {}",
            json["error"]["request_id"].as_str().unwrap()
        )));
        let hyper_431 = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        assert!(rewrite_transport_error(hyper_431).is_some());
        // The application's own answers are never touched: they carry bodies.
        let app = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 80\r\n\r\n";
        assert!(rewrite_transport_error(app).is_none());
        assert!(
            rewrite_transport_error(
                b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
            .is_none()
        );
    }
}
