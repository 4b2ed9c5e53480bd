//! A deadline for reading a request body: a client that trickles its body cannot hold a
//! connection and a handler forever. The whole body must arrive within the deadline.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// The error a body yields once its deadline has passed.
#[derive(Debug, thiserror::Error)]
#[error("the request body was not received in time")]
pub struct BodyDeadlineExceeded;

struct DeadlineBody {
    inner: Body,
    sleep: Pin<Box<Sleep>>,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyDeadlineExceeded))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Middleware: the request body must be read completely within `deadline` of the request's
/// arrival.
pub async fn limit_body_time(deadline: Duration, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let body = Body::new(DeadlineBody {
        inner: body,
        sleep: Box::pin(tokio::time::sleep_until(Instant::now() + deadline)),
    });
    next.run(Request::from_parts(parts, body)).await
}

/// Whether an error (or any of its sources) is a passed body deadline.
pub fn is_deadline(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if e.is::<BodyDeadlineExceeded>() {
            return true;
        }
        current = e.source();
    }
    false
}
