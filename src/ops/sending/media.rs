//! The media pipeline of channels whose provider takes uploads (WhatsApp Cloud; CONVENTIONS
//! "WhatsApp depth"): fetch the file with the webhook URL rules (`crate::media`), check its
//! sniffed type and size against WhatsApp's limits for the `media_type` (the domain's rules),
//! reuse a fresh upload of the same bytes on the same channel or upload it, and send by the
//! media id. Every refusal (`invalid_media`) comes before any send: nothing is recorded.
//!
//! Memory: the file is read into one buffer (never past the type's limit), hashed as it
//! arrives, and that same buffer is moved into the upload request; files in hand at once stay
//! within `SWITCHBOARD_MEDIA_MEMORY` (each holds its type's limit until its upload is done).

use serde_json::json;

use crate::media::FetchError;
use crate::providers::{MediaFile, Provider, ProviderError};
use crate::trace;
use switchboard_domain::channel::Channel;
use switchboard_domain::clock::Clock;
use switchboard_domain::message::timeline::{self, StepKind};
use switchboard_domain::message::{
    Content, MEDIA_UPLOAD_REUSE, Media, MediaIssue, MediaType, SNIFF_BYTES, check_whatsapp_media,
    sniff_mime, whatsapp_media_limit,
};
use switchboard_store::{MediaUpload, MessageStep};

use super::{Refusal, SendContext, SendError};

/// What the pipeline made of a send's content.
pub(super) enum Prepared {
    /// The content as given: nothing to fetch or upload (no copy on the common path).
    AsIs,
    /// The content to send instead: a media send by the id of an upload.
    Ready(Content),
    /// The provider refused the upload: the send fails as a provider rejection (recorded).
    UploadRejected(ProviderError),
}

/// Prepares a send's content: media on a channel whose provider takes uploads is fetched,
/// checked and uploaded (or a fresh upload of the same bytes reused); anything else is sent
/// as it is.
pub(super) async fn prepare(
    ctx: &SendContext<'_>,
    provider: &dyn Provider,
    channel: &Channel,
    content: &Content,
) -> Result<Prepared, SendError> {
    let media = match content {
        Content::Media(m) if provider.uploads_media() => m,
        _ => return Ok(Prepared::AsIs),
    };
    let limit = whatsapp_media_limit(media.media_type);
    // The file's share of the media memory budget, held until its upload is done.
    let _memory = ctx.providers.media().reserve(limit.max_bytes).await;
    let started = std::time::Instant::now();
    let fetched = ctx
        .providers
        .media()
        .fetch(&media.media_url, limit.max_bytes)
        .await
        .map_err(|e| refuse_fetch(media.media_type, e))?;
    let size = fetched.bytes.len() as u64;
    let head = &fetched.bytes[..fetched.bytes.len().min(SNIFF_BYTES)];
    let sniffed = sniff_mime(head);
    let mime = match check_whatsapp_media(media.media_type, sniffed, size) {
        Ok(Some(mime)) => mime.to_owned(),
        // A document of a type that cannot be sniffed (plain text, CSV, ...): as the server
        // said, else generic.
        Ok(None) => fetched
            .content_type
            .clone()
            .unwrap_or_else(|| "application/octet-stream".into()),
        Err(issue) => return Err(refuse_issue(media.media_type, issue).into()),
    };
    let sha256 = hex::encode(fetched.sha256);
    let now = ctx.clock.now();
    if let Some(upload) = ctx
        .store
        .find_media_upload(channel.id, &sha256, now.saturating_sub(MEDIA_UPLOAD_REUSE))
        .await?
    {
        metrics::counter!("switchboard_media_uploads_total", "result" => "reused").increment(1);
        return Ok(Prepared::Ready(by_id(media, upload.media_id)));
    }

    let file = MediaFile {
        bytes: fetched.bytes,
        file_name: media
            .file_name
            .clone()
            .unwrap_or_else(|| default_file_name(media.media_type, &mime)),
        mime: mime.clone(),
        timeout: ctx.providers.media().timeout(),
    };
    let mut span = trace::Span::start(
        "provider.upload_media",
        trace::Kind::Client,
        trace::current(),
    );
    span.attr("switchboard.channel_type", channel.channel_type.as_str());
    span.attr("switchboard.channel_uuid", channel.uuid.to_string());
    let uploaded = trace::scope(span.context(), provider.upload_media(file)).await;
    let result = match &uploaded {
        Ok(_) => "uploaded",
        Err(ProviderError::Rejected { .. }) => "rejected",
        Err(_) => "failed",
    };
    metrics::counter!("switchboard_media_uploads_total", "result" => result).increment(1);
    if uploaded.is_err() {
        span.fail(format!("upload {result}"));
    }
    drop(span);
    tracing::debug!(
        channel_uuid = %channel.uuid,
        media_type = %media.media_type,
        size,
        result,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "media upload"
    );
    match uploaded {
        Ok(media_id) => {
            ctx.store
                .save_media_upload(&MediaUpload {
                    channel_id: channel.id,
                    sha256,
                    media_id: media_id.clone(),
                    mime_type: mime,
                    size: size as i64,
                    uploaded_at: ctx.clock.now(),
                })
                .await?;
            Ok(Prepared::Ready(by_id(media, media_id)))
        }
        Err(e @ ProviderError::Rejected { .. }) => Ok(Prepared::UploadRejected(e)),
        Err(ProviderError::Unavailable(m)) => Err(SendError::ProviderUnavailable(m)),
        // The upload is not paced: throttling of it is an outage of the moment.
        Err(ProviderError::Throttled { http_status, .. }) => Err(SendError::ProviderUnavailable(
            format!("the provider throttled the media upload (HTTP {http_status})"),
        )),
        Err(ProviderError::NotConfigured(m)) => Err(SendError::ChannelUnusable {
            channel_id: channel.id,
            reason: "not_configured",
            message: m,
        }),
        Err(ProviderError::Unsupported(m)) => Err(SendError::ChannelUnusable {
            channel_id: channel.id,
            reason: "unsupported",
            message: m,
        }),
    }
}

/// The timeline of a send whose upload the provider refused: accepted, the provider request
/// (the upload) and its response, as [`super::provider::call`] writes them for a send.
pub(super) fn upload_rejected_steps(
    error: &ProviderError,
    channel: &Channel,
    clock: &dyn Clock,
) -> Vec<MessageStep> {
    let at = clock.now();
    let error = error.to_json(channel.channel_type);
    vec![
        MessageStep {
            at,
            kind: StepKind::Accepted,
            detail: json!({}),
        },
        MessageStep {
            at,
            kind: StepKind::ProviderRequest,
            detail: json!({ "provider": channel.channel_type, "operation": "upload_media" }),
        },
        MessageStep {
            at,
            kind: StepKind::ProviderResponse,
            detail: timeline::provider_response(None, Some(&error)),
        },
    ]
}

fn by_id(media: &Media, media_id: String) -> Content {
    Content::Media(Media {
        media_id: Some(media_id),
        ..media.clone()
    })
}

/// The upload's file name when the send gave none (WhatsApp shows it for documents).
fn default_file_name(media_type: MediaType, mime: &str) -> String {
    let ext = match mime {
        "image/jpeg" => "jpg",
        "image/png" => "png",
        "image/webp" => "webp",
        "video/mp4" => "mp4",
        "video/3gpp" => "3gp",
        "audio/mpeg" => "mp3",
        "audio/mp4" => "m4a",
        "audio/ogg" => "ogg",
        "audio/aac" => "aac",
        "audio/amr" => "amr",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        _ => "bin",
    };
    format!("{media_type}.{ext}")
}

fn megabytes(bytes: u64) -> String {
    if bytes >= 1024 * 1024 {
        format!("{} MB", bytes / (1024 * 1024))
    } else {
        format!("{} KB", bytes / 1024)
    }
}

fn refuse_fetch(media_type: MediaType, e: FetchError) -> Refusal {
    match e {
        FetchError::TooLarge { limit } => refuse_issue(media_type, MediaIssue::TooLarge { limit }),
        FetchError::Unreachable(why) => Refusal::media(
            "unreachable",
            media_type,
            format!("The media could not be fetched: {why}."),
            json!({}),
        ),
    }
}

fn refuse_issue(media_type: MediaType, issue: MediaIssue) -> Refusal {
    match issue {
        MediaIssue::TooLarge { limit } => Refusal::media(
            "too_large",
            media_type,
            format!(
                "The file is larger than WhatsApp's limit for {media_type} media ({}).",
                megabytes(limit)
            ),
            json!({ "limit_bytes": limit }),
        ),
        MediaIssue::UnsupportedType { sniffed, accepted } => Refusal::media(
            "unsupported_type",
            media_type,
            format!(
                "The file is {}, which WhatsApp does not accept as {media_type} media (accepted: {}).",
                sniffed.unwrap_or("of an unrecognized type"),
                accepted.join(", ")
            ),
            json!({ "sniffed_type": sniffed, "accepted_types": accepted }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_why_with_their_reason() {
        let r = refuse_issue(
            MediaType::Sticker,
            MediaIssue::TooLarge { limit: 500 * 1024 },
        );
        assert_eq!(r.code, "invalid_media");
        assert_eq!(r.details["reason"], "too_large");
        assert_eq!(r.details["limit_bytes"], 512_000);
        assert!(r.message.contains("500 KB"), "{}", r.message);
        let r = refuse_issue(
            MediaType::Video,
            MediaIssue::UnsupportedType {
                sniffed: Some("image/png"),
                accepted: &["video/mp4", "video/3gpp"],
            },
        );
        assert_eq!(r.details["reason"], "unsupported_type");
        assert_eq!(r.details["sniffed_type"], "image/png");
        assert_eq!(
            r.details["accepted_types"],
            json!(["video/mp4", "video/3gpp"])
        );
        let r = refuse_fetch(
            MediaType::Image,
            FetchError::Unreachable("the media URL answered HTTP 404".into()),
        );
        assert_eq!(
            (r.details["reason"].as_str(), r.message.as_str()),
            (
                Some("unreachable"),
                "The media could not be fetched: the media URL answered HTTP 404."
            )
        );
        assert_eq!(
            default_file_name(MediaType::Image, "image/png"),
            "image.png"
        );
        assert_eq!(
            default_file_name(MediaType::Document, "application/x-unknown"),
            "document.bin"
        );
    }
}
