//! Media sends: a media type, an http(s) URL, an optional caption and file name.

use super::{
    Content, MAX_CAPTION_CHARS, MAX_FILE_NAME_CHARS, MAX_MEDIA_URL_LEN, Media, MediaType,
    check_text,
};
use crate::ValidationErrors;

/// Checks a media URL: absolute `http` or `https` with a host, at most 2048 characters.
pub fn check_media_url(s: &str) -> Result<(), String> {
    if s.len() > MAX_MEDIA_URL_LEN {
        return Err(format!("must be at most {MAX_MEDIA_URL_LEN} characters"));
    }
    let url = url::Url::parse(s.trim()).map_err(|_| {
        "must be an absolute http(s) URL such as https://example.com/file.pdf".to_owned()
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be an http or https URL".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must name a host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry credentials".into());
    }
    Ok(())
}

/// The media send request's content fields, as received.
#[derive(Clone, Debug, Default)]
pub struct MediaInput<'a> {
    pub media_type: Option<&'a str>,
    pub media_url: Option<&'a str>,
    pub caption: Option<&'a str>,
    pub file_name: Option<&'a str>,
}

/// Validates a media send. `caption` is not allowed on audio and stickers (no provider shows
/// one); `file_name` is kept for every type but only documents carry it to the provider.
pub fn validate_media(input: &MediaInput<'_>) -> Result<Content, ValidationErrors> {
    let mut errors = ValidationErrors::new();
    let media_type = match input.media_type {
        None => {
            errors.add(
                "media_type",
                "is required: document, image, audio, video or sticker",
            );
            None
        }
        Some(t) => match t.parse::<MediaType>() {
            Ok(t) => Some(t),
            Err(e) => {
                errors.add("media_type", e);
                None
            }
        },
    };
    match input.media_url {
        None => errors.add("media_url", "is required"),
        Some(u) => {
            if let Err(issue) = check_media_url(u) {
                errors.add("media_url", issue);
            }
        }
    }
    check_text(
        &mut errors,
        "caption",
        input.caption,
        MAX_CAPTION_CHARS,
        false,
    );
    if input.caption.is_some() && matches!(media_type, Some(MediaType::Audio | MediaType::Sticker))
    {
        errors.add("caption", "is not supported for audio and sticker media");
    }
    if let Some(name) = input.file_name {
        check_text(
            &mut errors,
            "file_name",
            Some(name),
            MAX_FILE_NAME_CHARS,
            true,
        );
        if name
            .chars()
            .any(|c| c.is_control() || c == '/' || c == '\\')
        {
            errors.add(
                "file_name",
                "must not contain control characters or path separators",
            );
        }
    }
    // A missing or unknown media type and a missing URL were reported above.
    match (media_type, input.media_url) {
        (Some(media_type), Some(media_url)) if errors.is_empty() => Ok(Content::Media(Media {
            media_type,
            media_url: media_url.trim().to_owned(),
            caption: input.caption.map(str::to_owned),
            file_name: input.file_name.map(str::to_owned),
            media_id: None,
        })),
        _ => Err(errors),
    }
}

// ---------------------------------------------------------------------------------------------
// WhatsApp Cloud API media rules (CONVENTIONS "WhatsApp depth"): the service fetches the file,
// sniffs its real type from its first bytes and checks type and size before uploading it.

/// One mebibyte: WhatsApp's "MB" and "KB" in its media limits are binary.
const MB: u64 = 1024 * 1024;

/// How long an upload of the same bytes on the same channel is reused (WhatsApp keeps an
/// uploaded media for 30 days; a day is kept in hand).
pub const MEDIA_UPLOAD_REUSE: std::time::Duration = std::time::Duration::from_secs(29 * 24 * 3600);

/// What WhatsApp accepts for one media type: the largest size and the accepted (sniffed) MIME
/// types (`None`: any type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaLimit {
    pub max_bytes: u64,
    pub types: Option<&'static [&'static str]>,
}

/// The audio types WhatsApp accepts: AAC, AMR, MP3, MP4 audio and Ogg (Opus only: an Ogg
/// file sniffed as Vorbis is refused).
pub const WHATSAPP_AUDIO_TYPES: &[&str] = &[
    "audio/aac",
    "audio/amr",
    "audio/mpeg",
    "audio/mp4",
    "audio/ogg",
];

/// WhatsApp's limit for a media type: image jpeg/png 5 MB, audio 16 MB, video mp4/3gpp 16 MB,
/// document any type 100 MB, sticker webp 500 KB.
pub fn whatsapp_media_limit(media_type: MediaType) -> MediaLimit {
    match media_type {
        MediaType::Image => MediaLimit {
            max_bytes: 5 * MB,
            types: Some(&["image/jpeg", "image/png"]),
        },
        MediaType::Audio => MediaLimit {
            max_bytes: 16 * MB,
            types: Some(WHATSAPP_AUDIO_TYPES),
        },
        MediaType::Video => MediaLimit {
            max_bytes: 16 * MB,
            types: Some(&["video/mp4", "video/3gpp"]),
        },
        MediaType::Document => MediaLimit {
            max_bytes: 100 * MB,
            types: None,
        },
        MediaType::Sticker => MediaLimit {
            max_bytes: 500 * 1024,
            types: Some(&["image/webp"]),
        },
    }
}

/// The bytes a sniffer needs to see (the longest signature read is an Ogg Opus header).
pub const SNIFF_BYTES: usize = 512;

/// The MIME type of a file from its first bytes, when it is a known binary format (`None` for
/// plain text and unknown formats). 3GPP (an ISO base media file with a `3gp`/`3g2` brand) is
/// recognized here; everything else by the `infer` crate's signatures.
pub fn sniff_mime(head: &[u8]) -> Option<&'static str> {
    if head.len() >= 12
        && &head[4..8] == b"ftyp"
        && (&head[8..11] == b"3gp" || &head[8..11] == b"3g2")
    {
        return Some("video/3gpp");
    }
    infer::get(head).map(|t| t.mime_type())
}

/// Why a fetched file cannot be sent as the requested media type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MediaIssue {
    /// Larger than the type's limit.
    TooLarge { limit: u64 },
    /// Its real type is not one WhatsApp accepts for the media type (`sniffed`: what it is,
    /// when it could be told).
    UnsupportedType {
        sniffed: Option<&'static str>,
        accepted: &'static [&'static str],
    },
}

/// Checks a fetched file against WhatsApp's limit for `media_type`: its size and its sniffed
/// type. On success, the MIME type to upload it as (`None` for a document whose type could not
/// be sniffed: the caller falls back to what the server said, else `application/octet-stream`).
/// An MP4 container sent as audio is uploaded as `audio/mp4` (the same container).
pub fn check_whatsapp_media(
    media_type: MediaType,
    sniffed: Option<&'static str>,
    size: u64,
) -> Result<Option<&'static str>, MediaIssue> {
    let limit = whatsapp_media_limit(media_type);
    if size > limit.max_bytes {
        return Err(MediaIssue::TooLarge {
            limit: limit.max_bytes,
        });
    }
    let Some(accepted) = limit.types else {
        return Ok(sniffed);
    };
    let normalized = match (media_type, sniffed) {
        (MediaType::Audio, Some("audio/m4a" | "video/mp4")) => Some("audio/mp4"),
        (MediaType::Audio, Some("audio/opus")) => Some("audio/ogg"),
        // Ogg without Opus (Vorbis, FLAC): WhatsApp plays Opus only.
        (MediaType::Audio, Some("audio/ogg")) => None,
        (MediaType::Audio, Some("audio/x-aac")) => Some("audio/aac"),
        (_, s) => s,
    };
    match normalized {
        Some(mime) if accepted.contains(&mime) => Ok(Some(mime)),
        _ => Err(MediaIssue::UnsupportedType { sniffed, accepted }),
    }
}

#[cfg(test)]
mod whatsapp_tests {
    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";
    const JPEG: &[u8] = b"\xff\xd8\xff\xe0\0\x10JFIF\0\x01\x01\0\0\x01\0\x01\0\0";
    const WEBP: &[u8] = b"RIFF\x24\0\0\0WEBPVP8 \x18\0\0\0\x30\x01\0\x9d\x01\x2a";
    const MP4: &[u8] = b"\0\0\0\x18ftypmp42\0\0\0\0mp42isom\0\0\0\x08free";
    const GP3: &[u8] = b"\0\0\0\x14ftyp3gp4\0\0\0\0isom3gp4\0\0\0\x08free";
    const M4A: &[u8] = b"\0\0\0\x18ftypM4A \0\0\0\0M4A mp42\0\0\0\x08free";
    const MP3: &[u8] = b"ID3\x04\0\0\0\0\0\x21TIT2\0\0\0\x05\0\0\0test";
    const OGG: &[u8] =
        b"OggS\0\x02\0\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\0\0\0\0\x01\x13OpusHead\x01\x02";
    const OGG_VORBIS: &[u8] =
        b"OggS\0\x02\0\0\0\0\0\0\0\0\x01\0\0\0\0\0\0\0\0\0\0\0\x01\x1e\x01vorbis\0\0\0\0\x02";
    const AMR: &[u8] = b"#!AMR\n\x3c\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
    const PDF: &[u8] = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n";

    #[test]
    fn sniffing_tells_the_formats_whatsapp_takes() {
        assert_eq!(sniff_mime(PNG), Some("image/png"));
        assert_eq!(sniff_mime(JPEG), Some("image/jpeg"));
        assert_eq!(sniff_mime(WEBP), Some("image/webp"));
        assert_eq!(sniff_mime(MP4), Some("video/mp4"));
        assert_eq!(sniff_mime(GP3), Some("video/3gpp"));
        assert_eq!(sniff_mime(M4A), Some("audio/m4a"));
        assert_eq!(sniff_mime(MP3), Some("audio/mpeg"));
        assert_eq!(sniff_mime(OGG), Some("audio/opus"));
        assert_eq!(sniff_mime(OGG_VORBIS), Some("audio/ogg"));
        assert_eq!(sniff_mime(AMR), Some("audio/amr"));
        assert_eq!(sniff_mime(PDF), Some("application/pdf"));
        assert_eq!(sniff_mime(b"just some text\n"), None);
        assert_eq!(sniff_mime(b""), None);
    }

    #[test]
    fn types_are_checked_against_the_media_type() {
        let check =
            |t, bytes: &[u8]| check_whatsapp_media(t, sniff_mime(bytes), bytes.len() as u64);
        assert_eq!(check(MediaType::Image, PNG), Ok(Some("image/png")));
        assert_eq!(check(MediaType::Image, JPEG), Ok(Some("image/jpeg")));
        assert_eq!(check(MediaType::Video, MP4), Ok(Some("video/mp4")));
        assert_eq!(check(MediaType::Video, GP3), Ok(Some("video/3gpp")));
        assert_eq!(check(MediaType::Sticker, WEBP), Ok(Some("image/webp")));
        assert_eq!(check(MediaType::Audio, MP3), Ok(Some("audio/mpeg")));
        assert_eq!(check(MediaType::Audio, M4A), Ok(Some("audio/mp4")));
        assert_eq!(check(MediaType::Audio, MP4), Ok(Some("audio/mp4")));
        assert_eq!(check(MediaType::Audio, OGG), Ok(Some("audio/ogg")));
        assert_eq!(check(MediaType::Audio, AMR), Ok(Some("audio/amr")));
        // Documents: any type, also one that cannot be sniffed.
        assert_eq!(check(MediaType::Document, PDF), Ok(Some("application/pdf")));
        assert_eq!(check(MediaType::Document, PNG), Ok(Some("image/png")));
        assert_eq!(check(MediaType::Document, b"plain text"), Ok(None));
        // The wrong real type for the media type.
        assert_eq!(
            check(MediaType::Video, PNG),
            Err(MediaIssue::UnsupportedType {
                sniffed: Some("image/png"),
                accepted: &["video/mp4", "video/3gpp"],
            })
        );
        assert_eq!(
            check(MediaType::Image, b"not an image at all"),
            Err(MediaIssue::UnsupportedType {
                sniffed: None,
                accepted: &["image/jpeg", "image/png"],
            })
        );
        assert!(check(MediaType::Sticker, PNG).is_err());
        assert!(check(MediaType::Image, WEBP).is_err());
        assert!(check(MediaType::Audio, PDF).is_err());
        assert_eq!(
            check(MediaType::Audio, OGG_VORBIS),
            Err(MediaIssue::UnsupportedType {
                sniffed: Some("audio/ogg"),
                accepted: WHATSAPP_AUDIO_TYPES,
            })
        );
    }

    #[test]
    fn sizes_are_checked_against_the_limits() {
        let limits = [
            (MediaType::Image, 5 * MB, Some("image/png")),
            (MediaType::Audio, 16 * MB, Some("audio/mpeg")),
            (MediaType::Video, 16 * MB, Some("video/mp4")),
            (MediaType::Document, 100 * MB, Some("application/pdf")),
            (MediaType::Sticker, 500 * 1024, Some("image/webp")),
        ];
        for (t, limit, mime) in limits {
            assert_eq!(whatsapp_media_limit(t).max_bytes, limit);
            assert_eq!(
                check_whatsapp_media(t, mime, limit),
                Ok(mime),
                "{t} at the limit"
            );
            assert_eq!(
                check_whatsapp_media(t, mime, limit + 1),
                Err(MediaIssue::TooLarge { limit }),
                "{t} one byte over"
            );
        }
        // Size is judged first: an oversized file of the wrong type is too large.
        assert_eq!(
            check_whatsapp_media(MediaType::Image, None, 6 * MB),
            Err(MediaIssue::TooLarge { limit: 5 * MB })
        );
    }
}
