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
        })),
        _ => Err(errors),
    }
}
