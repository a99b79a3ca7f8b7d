//! The changes an Azure storage queue message names: Event Grid's blob events as it
//! delivers them to a queue (the event's JSON, base64-encoded, one event per message), in
//! Event Grid's own schema (`eventType`) or as a CloudEvent (`type`); an array of events
//! is read too. `Microsoft.Storage.BlobCreated` is a created (or overwritten) object,
//! `Microsoft.Storage.BlobDeleted` a removed one; the subject names the container and the
//! blob (`/blobServices/default/containers/CONTAINER/blobs/NAME`). Other event types
//! (tier changes, the hierarchical namespace's renames) change nothing here: the listing
//! sweep finds what they did.

use super::s3_event::{Change, ChangeKind};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;

/// The changes message text `text` names; an error says why it is no Event Grid event.
pub fn changes(text: &str) -> Result<Vec<Change>, String> {
    let trimmed = text.trim();
    let json = if trimmed.starts_with(['{', '[']) {
        trimmed.to_string()
    } else {
        let bytes = BASE64
            .decode(trimmed)
            .map_err(|_| "neither JSON nor base64".to_string())?;
        String::from_utf8(bytes).map_err(|_| "base64 of no UTF-8 text".to_string())?
    };
    let v: Value = serde_json::from_str(&json).map_err(|e| format!("not JSON: {e}"))?;
    let events = match v {
        Value::Array(events) => events,
        one => vec![one],
    };
    let mut out = Vec::new();
    for e in &events {
        let kind = e
            .get("eventType")
            .or_else(|| e.get("type"))
            .and_then(Value::as_str)
            .ok_or("an event without an eventType or type")?;
        let kind = match kind {
            "Microsoft.Storage.BlobCreated" => ChangeKind::Created,
            "Microsoft.Storage.BlobDeleted" => ChangeKind::Removed,
            _ => continue,
        };
        let subject = e
            .get("subject")
            .and_then(Value::as_str)
            .ok_or("a blob event without a subject")?;
        let (container, key) = subject
            .strip_prefix("/blobServices/default/containers/")
            .and_then(|rest| rest.split_once("/blobs/"))
            .filter(|(c, k)| !c.is_empty() && !k.is_empty())
            .ok_or_else(|| format!("a blob event whose subject names no blob: {subject}"))?;
        out.push(Change {
            bucket: container.to_string(),
            key: key.to_string(),
            kind,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, subject: &str) -> String {
        serde_json::json!({
            "topic": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/acct",
            "subject": subject,
            "eventType": kind,
            "id": "1",
            "data": { "api": "PutBlob", "url": "https://acct.blob.core.windows.net/c/k" },
            "dataVersion": "",
            "metadataVersion": "1",
            "eventTime": "2026-11-28T00:00:00Z"
        })
        .to_string()
    }

    #[test]
    fn blob_events_as_event_grid_delivers_them_to_a_queue() {
        let created = event(
            "Microsoft.Storage.BlobCreated",
            "/blobServices/default/containers/data/blobs/ev/a b+c.txt",
        );
        let want = vec![Change {
            bucket: "data".into(),
            key: "ev/a b+c.txt".into(),
            kind: ChangeKind::Created,
        }];
        // Base64, as Event Grid puts it in the queue, and plain JSON.
        assert_eq!(changes(&BASE64.encode(&created)).unwrap(), want);
        assert_eq!(changes(&created).unwrap(), want);
        let deleted = event(
            "Microsoft.Storage.BlobDeleted",
            "/blobServices/default/containers/data/blobs/x/y",
        );
        assert_eq!(changes(&deleted).unwrap()[0].kind, ChangeKind::Removed);
        // A CloudEvent, and an array of events.
        let cloud = serde_json::json!({
            "specversion": "1.0",
            "type": "Microsoft.Storage.BlobCreated",
            "source": "/subscriptions/s/.../storageAccounts/acct",
            "subject": "/blobServices/default/containers/data/blobs/k",
            "data": {}
        })
        .to_string();
        assert_eq!(changes(&cloud).unwrap()[0].key, "k");
        let both = format!("[{created},{deleted}]");
        assert_eq!(changes(&both).unwrap().len(), 2);
        // Other event types change nothing.
        let tier = event(
            "Microsoft.Storage.BlobTierChanged",
            "/blobServices/default/containers/data/blobs/k",
        );
        assert_eq!(changes(&tier).unwrap(), []);
    }

    #[test]
    fn what_is_no_blob_event_is_an_error() {
        for bad in [
            "",
            "%%%",
            &BASE64.encode([0xff, 0xfe]),
            "{\"no\": \"type\"}",
            &event("Microsoft.Storage.BlobCreated", "/somewhere/else"),
            &event(
                "Microsoft.Storage.BlobCreated",
                "/blobServices/default/containers/data/blobs/",
            ),
        ] {
            assert!(changes(bad).is_err(), "{bad:?}");
        }
    }
}
