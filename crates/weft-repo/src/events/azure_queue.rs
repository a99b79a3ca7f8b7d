//! A small Azure Queue Storage client: the calls an `az://` repository's event queue needs
//! (Get Messages, Delete Message, Get Queue Metadata; Create Queue and Put Message for
//! tests and setup), signed with the account's Shared Key, sent by `object_store`'s HTTP
//! client. Event Grid delivers a container's blob events to such a queue
//! ([`crate::events::event_grid`]). No Azure SDK: these calls are all the agent makes.
//!
//! The queue's URL is `https://ACCOUNT.queue.core.windows.net/QUEUE`, or an emulator's
//! path-style `http://127.0.0.1:10001/ACCOUNT/QUEUE` (Azurite). Errors name the queue by
//! its URL and carry the service's error code; never the key.

use crate::error::RepoError;
use crate::events::sqs::Message;
use crate::store::AzureAccess;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use hmac::{Hmac, KeyInit, Mac};
use object_store::client::{HttpClient, HttpRequestBody};
use sha2::Sha256;
use std::time::{Duration, SystemTime};
use weft_proto::Errno;

/// Most messages one Get Messages answers (the service's limit).
pub const RECEIVE_MAX: usize = 32;
/// The longest an answer may be: 32 messages of the largest (64 KiB, base64) and their
/// envelopes.
pub const ANSWER_MAX: usize = 4 << 20;
/// The longest a call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The service version the calls are made in.
const API_VERSION: &str = "2020-10-02";

/// A queue, with the account and key to reach it.
#[derive(Debug, Clone)]
pub struct AzureQueue {
    http: HttpClient,
    /// The queue's URL, as given.
    queue: String,
    /// The queue's URL, parsed (no query, no trailing `/`).
    base: url::Url,
    account: String,
    /// The account key, decoded.
    key: Vec<u8>,
}

impl AzureQueue {
    /// A client of the queue at `queue` (its URL), reached with `access`'s account key.
    pub fn new(queue: &str, access: &AzureAccess) -> Result<Self, RepoError> {
        let bad = |why: &str| RepoError::Spec(format!("event queue {queue}: {why}"));
        let mut base = url::Url::parse(queue).map_err(|e| bad(&e.to_string()))?;
        let http = super::queue_client(&base, CALL_TIMEOUT).map_err(|e| bad(&e))?;
        base.set_query(None);
        base.set_fragment(None);
        let path = base.path().trim_end_matches('/').to_string();
        if path.is_empty() {
            return Err(bad("no queue name in the URL"));
        }
        base.set_path(&path);
        let key = access.key.as_deref().ok_or_else(|| {
            bad("Azure storage queues are reached with the account key: set AZURE_STORAGE_ACCOUNT_KEY")
        })?;
        let key = BASE64
            .decode(key.trim())
            .map_err(|_| bad("the account key is not base64"))?;
        Ok(Self {
            http,
            queue: queue.to_string(),
            base,
            account: access.account.clone(),
            key,
        })
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.queue
    }

    /// Up to `max` (at most [`RECEIVE_MAX`]) messages, hidden from other receivers for
    /// `visibility`; none if the queue is empty (the service does not wait for any).
    pub async fn receive(
        &self,
        max: usize,
        visibility: Duration,
    ) -> Result<Vec<Message>, RepoError> {
        let n = max.clamp(1, RECEIVE_MAX).to_string();
        let v = visibility.as_secs().max(1).to_string();
        let answer = self
            .call(
                http::Method::GET,
                "/messages",
                &[("numofmessages", &n), ("visibilitytimeout", &v)],
                None,
            )
            .await?;
        let text = String::from_utf8_lossy(&answer);
        let mut out = Vec::new();
        for block in blocks(&text, "QueueMessage") {
            let field = |name: &str| element(block, name).map(unescape);
            let (Some(id), Some(pop)) = (field("MessageId"), field("PopReceipt")) else {
                return Err(self.error(Errno::Io, "a message without an id or pop receipt"));
            };
            out.push(Message {
                // Deleting takes both; an id (a GUID) has no space.
                receipt: format!("{id} {pop}"),
                body: field("MessageText").unwrap_or_default(),
            });
        }
        Ok(out)
    }

    /// Deletes received messages one by one (the service has no batch delete); answers
    /// how many could not be deleted (they come back after their visibility timeout).
    pub async fn delete(&self, receipts: &[String]) -> Result<usize, RepoError> {
        let mut failed = 0;
        for receipt in receipts {
            let Some((id, pop)) = receipt.split_once(' ') else {
                failed += 1;
                continue;
            };
            let path = format!("/messages/{id}");
            if self
                .call(http::Method::DELETE, &path, &[("popreceipt", pop)], None)
                .await
                .is_err()
            {
                failed += 1;
            }
        }
        Ok(failed)
    }

    /// Puts a message with text `text` (tests, and tools that feed a queue by hand).
    pub async fn send(&self, text: &str) -> Result<(), RepoError> {
        let body = format!(
            "<QueueMessage><MessageText>{}</MessageText></QueueMessage>",
            escape(text)
        );
        self.call(http::Method::POST, "/messages", &[], Some(body))
            .await
            .map(|_| ())
    }

    /// Reads the queue's metadata: the check that the queue exists and the key may use it.
    pub async fn check(&self) -> Result<(), RepoError> {
        self.call(http::Method::GET, "", &[("comp", "metadata")], None)
            .await
            .map(|_| ())
    }

    /// Creates the queue (an existing one with no metadata is left as it is).
    pub async fn create(&self) -> Result<(), RepoError> {
        self.call(http::Method::PUT, "", &[], None)
            .await
            .map(|_| ())
    }

    /// One signed call: `method` on the queue's URL plus `suffix`, with `query`; the
    /// answer's body.
    async fn call(
        &self,
        method: http::Method,
        suffix: &str,
        query: &[(&str, &str)],
        body: Option<String>,
    ) -> Result<Bytes, RepoError> {
        let mut url = self.base.clone();
        url.set_path(&format!("{}{suffix}", self.base.path()));
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query.iter().copied());
        }
        let body = Bytes::from(body.unwrap_or_default());
        let date = httpdate::fmt_http_date(SystemTime::now());
        let authorization = format!(
            "SharedKey {}:{}",
            self.account,
            self.signature(&method, &url, body.len(), &date, query)
        );
        let request = http::Request::builder()
            .method(method.clone())
            .uri(url.as_str())
            .header("x-ms-date", &date)
            .header("x-ms-version", API_VERSION)
            .header(http::header::AUTHORIZATION, authorization)
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(HttpRequestBody::from(body))
            .map_err(|e| self.error(Errno::Inval, &e.to_string()))?;
        let what = format!("{method} {}{suffix}", self.base.path());
        let response = self
            .http
            .execute(request)
            .await
            .map_err(|e| self.error(Errno::Io, &format!("{what}: {e}")))?;
        let status = response.status();
        let code = response
            .headers()
            .get("x-ms-error-code")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let bytes = super::bounded_body(response, ANSWER_MAX)
            .await
            .map_err(|e| self.error(Errno::Io, &format!("{what}: {e}")))?;
        if status.is_success() {
            return Ok(bytes);
        }
        let errno = match status.as_u16() {
            404 => Errno::NoEnt,
            401 | 403 => Errno::Access,
            _ => Errno::Io,
        };
        Err(self.error(errno, &format!("{what}: {status} {code}")))
    }

    /// The Shared Key signature of a request: HMAC-SHA256 with the account key of the
    /// verb, the standard headers (only Content-Length is ever set), the `x-ms-` headers,
    /// and the resource (`/ACCOUNT/PATH`, then each query parameter as `name:value`).
    fn signature(
        &self,
        method: &http::Method,
        url: &url::Url,
        length: usize,
        date: &str,
        query: &[(&str, &str)],
    ) -> String {
        let length = if length == 0 {
            String::new()
        } else {
            length.to_string()
        };
        let mut resource = format!("/{}{}", self.account, url.path());
        let mut params: Vec<(String, &str)> = query
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), *v))
            .collect();
        params.sort();
        for (k, v) in params {
            resource.push_str(&format!("\n{k}:{v}"));
        }
        let to_sign = format!(
            "{method}\n\n\n{length}\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{API_VERSION}\n{resource}"
        );
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(to_sign.as_bytes());
        BASE64.encode(mac.finalize().into_bytes())
    }

    fn error(&self, errno: Errno, message: &str) -> RepoError {
        RepoError::Store {
            url: self.queue.clone(),
            message: message.to_string(),
            errno,
        }
    }
}

/// The contents of each `<name>...</name>` element of `xml`, in order.
fn blocks<'a>(xml: &'a str, name: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{name}>"), format!("</{name}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        out.push(&after[..end]);
        rest = &after[end + close.len()..];
    }
    out
}

/// The contents of the first `<name>...</name>` element of `xml`.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    blocks(xml, name).into_iter().next()
}

/// Text with XML's five entities replaced by their characters.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// Text with `&`, `<` and `>` as XML entities.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_read_from_the_services_xml() {
        let xml = "<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessagesList>\
            <QueueMessage><MessageId>id-1</MessageId><InsertionTime>x</InsertionTime>\
            <PopReceipt>AgAA+/x=</PopReceipt><MessageText>a &lt;b&gt; &amp;amp;</MessageText>\
            </QueueMessage><QueueMessage><MessageId>id-2</MessageId>\
            <PopReceipt>p2</PopReceipt><MessageText></MessageText></QueueMessage>\
            </QueueMessagesList>";
        let got: Vec<(Option<&str>, Option<String>)> = blocks(xml, "QueueMessage")
            .into_iter()
            .map(|b| {
                (
                    element(b, "MessageId"),
                    element(b, "MessageText").map(unescape),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (Some("id-1"), Some("a <b> &amp;".to_string())),
                (Some("id-2"), Some(String::new())),
            ]
        );
        assert_eq!(unescape(&escape("<&>\"'")), "<&>\"'");
        assert!(blocks("<QueueMessage>unterminated", "QueueMessage").is_empty());
    }

    #[test]
    fn a_queue_url_needs_a_name_and_a_key() {
        let access = |key: Option<&str>| AzureAccess {
            container: "c".into(),
            account: "acct".into(),
            key: key.map(str::to_string),
        };
        let key = Some("a2V5");
        assert!(AzureQueue::new("http://127.0.0.1:10001/acct/q", &access(key)).is_ok());
        for bad in ["http://127.0.0.1:10001/", "ftp://h/q", "not a url"] {
            assert!(AzureQueue::new(bad, &access(key)).is_err(), "{bad}");
        }
        let e = AzureQueue::new("https://acct.queue.core.windows.net/q", &access(None))
            .unwrap_err()
            .to_string();
        assert!(e.contains("AZURE_STORAGE_ACCOUNT_KEY"), "{e}");
        assert!(
            AzureQueue::new(
                "https://acct.queue.core.windows.net/q",
                &access(Some("*not*"))
            )
            .is_err()
        );
    }
}
