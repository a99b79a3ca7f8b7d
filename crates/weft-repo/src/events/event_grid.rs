//! The changes an Azure storage queue message names: Event Grid's blob events as it
//! delivers them to a queue (the event's JSON, base64-encoded, one event per message), in
//! Event Grid's own schema (`eventType`) or as a CloudEvent (`type`); an array of events
//! is read too. `Microsoft.Storage.BlobCreated` is a created (or overwritten) object,
//! `Microsoft.Storage.BlobDeleted` a removed one; the subject names the container and the
//! blob (`/blobServices/default/containers/CONTAINER/blobs/NAME`). A storage account with
//! a hierarchical namespace (Azure Data Lake Storage) also sends `BlobRenamed` (the
//! source, `data.sourceUrl`, removed; the subject created), `DirectoryRenamed` (every
//! object under the source directory removed, every one under the subject created) and
//! `DirectoryDeleted` (every object under the subject removed). Other event types (tier
//! changes, `DirectoryCreated`: an empty directory) change nothing here.

use super::s3_event::{Change, ChangeKind};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;

/// The event types that change what the repository holds.
const FOLLOWED: [&str; 5] = [
    "Microsoft.Storage.BlobCreated",
    "Microsoft.Storage.BlobDeleted",
    "Microsoft.Storage.BlobRenamed",
    "Microsoft.Storage.DirectoryRenamed",
    "Microsoft.Storage.DirectoryDeleted",
];

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
        if !FOLLOWED.contains(&kind) {
            continue;
        }
        let subject = e
            .get("subject")
            .and_then(Value::as_str)
            .ok_or("a blob event without a subject")?;
        let (container, key) = subject
            .strip_prefix("/blobServices/default/containers/")
            .and_then(|rest| rest.split_once("/blobs/"))
            .filter(|(c, k)| !c.is_empty() && !k.is_empty())
            .ok_or_else(|| format!("a blob event whose subject names no blob: {subject}"))?;
        let source = || {
            let url = e
                .pointer("/data/sourceUrl")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("a {kind} event without data.sourceUrl"))?;
            source_key(url, container)
                .ok_or_else(|| format!("a {kind} event whose source is not in {container}: {url}"))
        };
        let mut push = |key: String, kind: ChangeKind| {
            out.push(Change {
                bucket: container.to_string(),
                key,
                kind,
            })
        };
        match kind {
            "Microsoft.Storage.BlobCreated" => push(key.to_string(), ChangeKind::Created),
            "Microsoft.Storage.BlobDeleted" => push(key.to_string(), ChangeKind::Removed),
            "Microsoft.Storage.BlobRenamed" => {
                push(source()?, ChangeKind::Removed);
                push(key.to_string(), ChangeKind::Created);
            }
            "Microsoft.Storage.DirectoryRenamed" => {
                push(source()?, ChangeKind::DirectoryRemoved);
                push(key.to_string(), ChangeKind::DirectoryCreated);
            }
            "Microsoft.Storage.DirectoryDeleted" => {
                push(key.to_string(), ChangeKind::DirectoryRemoved)
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The key a rename's `data.sourceUrl` names in `container` (the path after the
/// container's segment, decoded): `https://ACCOUNT.dfs.core.windows.net/CONTAINER/KEY`,
/// or with the account in the path as emulators have it.
fn source_key(url: &str, container: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    let mut segments = url.path_segments()?;
    segments.by_ref().find(|s| *s == container)?;
    let key: Vec<String> = segments
        .map(|s| super::s3_event::percent_decode(s, false))
        .collect::<Option<_>>()?;
    let key = key.join("/");
    (!key.is_empty()).then_some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Event Grid event of `kind` on `subject` with `data`.
    fn event_with(kind: &str, subject: &str, data: serde_json::Value) -> String {
        serde_json::json!({
            "topic": "/subscriptions/s/resourceGroups/g/providers/Microsoft.Storage/storageAccounts/acct",
            "subject": subject,
            "eventType": kind,
            "id": "1",
            "data": data,
            "dataVersion": "",
            "metadataVersion": "1",
            "eventTime": "2026-11-28T00:00:00Z"
        })
        .to_string()
    }

    fn event(kind: &str, subject: &str) -> String {
        let data = serde_json::json!({ "api": "PutBlob", "url": "https://acct.blob.core.windows.net/c/k" });
        event_with(kind, subject, data)
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

    fn renamed(kind: &str, subject: &str, source: &str) -> String {
        let data = serde_json::json!({
            "api": "RenameFile",
            "sourceUrl": source,
            "destinationUrl": "https://acct.dfs.core.windows.net/data/new",
        });
        event_with(kind, subject, data)
    }

    fn change(key: &str, kind: ChangeKind) -> Change {
        Change {
            bucket: "data".into(),
            key: key.into(),
            kind,
        }
    }

    #[test]
    fn hierarchical_namespace_renames_and_deletes() {
        // A file renamed: the source (percent-encoded in its URL) removed, the subject
        // created.
        let file = renamed(
            "Microsoft.Storage.BlobRenamed",
            "/blobServices/default/containers/data/blobs/ev/new name.txt",
            "https://acct.dfs.core.windows.net/data/ev/old%20name%2B1.txt",
        );
        assert_eq!(
            changes(&file).unwrap(),
            [
                change("ev/old name+1.txt", ChangeKind::Removed),
                change("ev/new name.txt", ChangeKind::Created),
            ]
        );
        // A directory renamed (an emulator's URL, the account in the path), and deleted.
        let dir = renamed(
            "Microsoft.Storage.DirectoryRenamed",
            "/blobServices/default/containers/data/blobs/runs/b",
            "http://127.0.0.1:10000/devstoreaccount1/data/runs/a",
        );
        assert_eq!(
            changes(&dir).unwrap(),
            [
                change("runs/a", ChangeKind::DirectoryRemoved),
                change("runs/b", ChangeKind::DirectoryCreated),
            ]
        );
        let deleted = event(
            "Microsoft.Storage.DirectoryDeleted",
            "/blobServices/default/containers/data/blobs/runs/b",
        );
        assert_eq!(
            changes(&deleted).unwrap(),
            [change("runs/b", ChangeKind::DirectoryRemoved)]
        );
        // An empty directory made changes nothing.
        let made = event(
            "Microsoft.Storage.DirectoryCreated",
            "/blobServices/default/containers/data/blobs/runs/c",
        );
        assert_eq!(changes(&made).unwrap(), []);
        // A rename without a source in the container is no event to follow.
        for source in [
            "https://acct.dfs.core.windows.net/other/x",
            "not a url",
            "https://acct.dfs.core.windows.net/data",
        ] {
            let bad = renamed(
                "Microsoft.Storage.BlobRenamed",
                "/blobServices/default/containers/data/blobs/x",
                source,
            );
            assert!(changes(&bad).is_err(), "{source}");
        }
        let no_source = event(
            "Microsoft.Storage.BlobRenamed",
            "/blobServices/default/containers/data/blobs/x",
        );
        assert!(changes(&no_source).is_err());
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
