//! Conformance of media uploads (the WhatsApp upload cache), on both backends.

use crate::support::*;
use switchboard_domain::channel::ChannelType;
use switchboard_store::*;

conformance!(media_uploads_are_found_per_channel_and_file_while_fresh);

async fn media_uploads_are_found_per_channel_and_file_while_fresh(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let mut wa = new_channel(org.id, Some("wa"), "WhatsApp", true);
    wa.channel_type = ChannelType::WhatsappCloud;
    let wa = s.create_channel(wa, no_effects()).await.unwrap();
    let mut wa2 = new_channel(org.id, Some("wa2"), "WhatsApp 2", false);
    wa2.channel_type = ChannelType::WhatsappCloud;
    let wa2 = s.create_channel(wa2, no_effects()).await.unwrap();
    let hash = "ab".repeat(32);
    let upload = MediaUpload {
        channel_id: wa.id,
        sha256: hash.clone(),
        media_id: "1001".into(),
        mime_type: "image/png".into(),
        size: 68,
        uploaded_at: t(1_000),
    };

    assert_eq!(s.find_media_upload(wa.id, &hash, t(0)).await.unwrap(), None);
    s.save_media_upload(&upload).await.unwrap();
    // Found from the same channel while fresh (the bound is inclusive)...
    assert_eq!(
        s.find_media_upload(wa.id, &hash, t(1_000)).await.unwrap(),
        Some(upload.clone())
    );
    // ...not once older than the bound, not on another channel, not for other bytes.
    assert_eq!(
        s.find_media_upload(wa.id, &hash, t(1_001)).await.unwrap(),
        None
    );
    assert_eq!(
        s.find_media_upload(wa2.id, &hash, t(0)).await.unwrap(),
        None
    );
    assert_eq!(
        s.find_media_upload(wa.id, &"cd".repeat(32), t(0))
            .await
            .unwrap(),
        None
    );

    // A new upload of the same file replaces the old one.
    let again = MediaUpload {
        media_id: "2002".into(),
        uploaded_at: t(9_000),
        ..upload.clone()
    };
    s.save_media_upload(&again).await.unwrap();
    assert_eq!(
        s.find_media_upload(wa.id, &hash, t(5_000)).await.unwrap(),
        Some(again)
    );
    // The other channel keeps its own upload of the same file.
    let other = MediaUpload {
        channel_id: wa2.id,
        media_id: "3003".into(),
        ..upload
    };
    s.save_media_upload(&other).await.unwrap();
    assert_eq!(
        s.find_media_upload(wa2.id, &hash, t(0)).await.unwrap(),
        Some(other)
    );
    assert_eq!(
        s.find_media_upload(wa.id, &hash, t(0))
            .await
            .unwrap()
            .map(|u| u.media_id),
        Some("2002".into())
    );
}
